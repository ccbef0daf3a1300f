#pragma once

// What a simulation run's workload was told of the instances and floating IPs it named, which
// the invariants check the datastore against after every crash (sim/invariants.h).

#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"

namespace fp::sim {

// Each name: made (true) or deleted (false) as an answer said; a name whose create or delete got
// no answer that says (503, the server gone) may have gone either way until a later answer.
struct Ledger {
  std::map<std::string, bool> acknowledged;
  std::set<std::string> uncertain;

  // The create or delete of `name` answered `s`: it exists (`exists_if_ok`) or not if `s` is
  // ok; uncertain on ServiceUnavailable or Internal; a refusal changes nothing.
  void Settle(const std::string& name, bool exists_if_ok, const Status& s);
  // A create of `name` answered `s`: settled, and added to `names` (the workload's list to pick
  // from) unless it surely does not exist.
  void Created(std::vector<std::string>& names, const std::string& name, const Status& s);
  // A delete of `name` answered `s` (a name never made stays out of the ledger); on success it
  // leaves `names`.
  void Deleted(std::vector<std::string>& names, const std::string& name, const Status& s);
};

}  // namespace fp::sim
