#pragma once

// Sleds: where instances run (sleds.cc).

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/ip.h"
#include "db/datastore.h"
#include "model/instances.h"

namespace fp::db {

// Registers the sled with this serial, or updates its agent URL; the id is stable per serial.
Result<Sled> SledUpsert(Datastore& ds, const std::string& serial, const std::string& agent_url,
                        const IpAddr& underlay);
Result<std::vector<Sled>> SledList(Datastore& ds);
Result<Sled> SledGet(Datastore& ds, const Uuid& id);
Result<Sled> SledGetIn(Tx& tx, const Uuid& id);
// Running (vmm) instances per sled, for placement.
Result<std::vector<std::pair<Uuid, int64_t>>> SledLoad(Datastore& ds);
// The least loaded of `candidates` (fewest instances with a VMM), ties broken by id.
// ServiceUnavailable if there are no candidates.
Result<Uuid> PickSledIn(Tx& tx, const std::vector<Uuid>& candidates);

}  // namespace fp::db
