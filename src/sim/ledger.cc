#include "sim/ledger.h"

#include <algorithm>

namespace fp::sim {

void Ledger::Settle(const std::string& name, bool exists_if_ok, const Status& s) {
  if (s) {
    acknowledged[name] = exists_if_ok;
    uncertain.erase(name);
  } else if (s.error().kind() == ErrorKind::kServiceUnavailable ||
             s.error().kind() == ErrorKind::kInternal) {
    uncertain.insert(name);
  }
}

void Ledger::Created(std::vector<std::string>& names, const std::string& name, const Status& s) {
  Settle(name, true, s);
  if (s || uncertain.count(name)) names.push_back(name);
}

void Ledger::Deleted(std::vector<std::string>& names, const std::string& name, const Status& s) {
  if (acknowledged.count(name) || uncertain.count(name)) Settle(name, false, s);
  if (s) names.erase(std::remove(names.begin(), names.end(), name), names.end());
}

}  // namespace fp::sim
