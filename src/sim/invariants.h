#pragma once

// What a simulation run checks once it has quiesced (the invariants of
// spec/sagas-and-reliability.md): no saga left unfinished; every switch holding exactly the
// datastore's NAT; every sled running exactly the instances the datastore places there, with
// exactly their addresses; no address held twice or left mid-attach; and every create or delete
// the workload was answered durable through crashes.

#include <map>
#include <set>
#include <string>
#include <vector>

#include "sim/rack.h"

namespace fp::sim {

// What the workload was told of the instances and floating IPs it named: made (true) or deleted
// (false); a name whose create or delete got no answer may have gone either way.
struct Ledger {
  std::map<std::string, bool> acknowledged;
  std::set<std::string> uncertain;
};

struct Observed {
  std::vector<std::string> violations;  // one line per invariant that does not hold
  std::vector<std::string> state;       // the final rows the run's trace ends with, sorted
};

Observed CheckInvariants(Rack& rack, const Ledger& ledger);

}  // namespace fp::sim
