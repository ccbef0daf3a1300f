#pragma once

// Sleds: where instances run (sleds.cc).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
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
// A sled row's columns, the table aliased `s`, and their decoding: for statements that read a
// sled beside other rows (db/attach.cc).
inline constexpr std::string_view kSledColumns =
    "s.id, s.serial, s.agent_url, s.underlay_address, s.time_created, s.time_modified";
inline constexpr size_t kSledColumnCount = 6;
Result<Sled> SledFromRow(const Row& r);

Result<Sled> SledGetIn(Tx& tx, const Uuid& id);
// Running (vmm) instances per sled, for placement.
Result<std::vector<std::pair<Uuid, int64_t>>> SledLoad(Datastore& ds);
// The least loaded of `candidates` (fewest instances with a VMM), ties broken by id.
// ServiceUnavailable if there are no candidates.
Result<Uuid> PickSledIn(Tx& tx, const std::vector<Uuid>& candidates);

}  // namespace fp::db
