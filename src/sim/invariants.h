#pragma once

// What a simulation run checks once it has quiesced (the invariants of
// spec/sagas-and-reliability.md): no saga left unfinished; every switch holding exactly the
// datastore's NAT; every sled running exactly the instances the datastore places there, with
// exactly their addresses; no address held twice or left mid-attach; and every create or delete
// the workload was answered durable through crashes.

#include <string>
#include <vector>

#include "sim/ledger.h"
#include "sim/rack.h"

namespace fp::sim {

struct Observed {
  std::vector<std::string> violations;  // one line per invariant that does not hold
  std::vector<std::string> state;       // the final rows the run's trace ends with, sorted
};

Observed CheckInvariants(Rack& rack, const Ledger& ledger);

}  // namespace fp::sim
