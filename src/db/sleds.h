#pragma once

// Sleds: where instances run (sleds.cc).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/ip.h"
#include "db/datastore.h"
#include "db/lease_fence.h"
#include "model/instances.h"

namespace fp::db {

// Registers the sled with this serial, or updates its agent URL and underlay address: the id is
// stable per serial, so an agent that comes back on another URL is the same sled. A sled named
// by its agent's URL (below) whose agent now says its serial takes that serial. Without a
// serial (the agent has none, or did not answer), the sled last registered at `agent_url` is
// meant, else a new one whose serial is the URL.
Result<Sled> SledUpsert(Datastore& ds, const std::optional<std::string>& serial,
                        const std::string& agent_url, const IpAddr& underlay);
Result<std::vector<Sled>> SledList(Datastore& ds);
Result<Sled> SledGet(Datastore& ds, const Uuid& id);
// A sled row's columns, the table aliased `s`, and their decoding: for statements that read a
// sled beside other rows (db/attach.cc).
inline constexpr std::string_view kSledColumns =
    "s.id, s.serial, s.agent_url, s.underlay_address, s.time_created, s.time_modified, s.policy, "
    "s.agent_answers, s.agent_since";
inline constexpr size_t kSledColumnCount = 9;
Result<Sled> SledFromRow(const Row& r);

Result<Sled> SledGetIn(Tx& tx, const Uuid& id);

// Records whether the sled's agent answers, if that changed (`agent_since` becomes now).
// Returns whether it changed. With `fence`, nothing changes (ServiceUnavailable) once its holder
// no longer holds its lease.
Result<bool> SledRecordAgent(Datastore& ds, const Uuid& sled_id, bool answers,
                             const LeaseFence* fence = nullptr);

// Expunges the sled: out of service for good. In one transaction it fails every instance that
// runs there (state failed, its NAT rows removed, as a lost VM fails it: the instance can be
// started again elsewhere and its addresses detached) and takes the sled out of placement.
// Idempotent: an expunged sled is returned as it is. ServiceUnavailable naming the instance
// while an instance on the sled is starting or rebooting, or any migration is in progress
// (retry when it is done). NotFound for an unknown sled.
Result<Sled> SledExpunge(Datastore& ds, const Uuid& sled_id, const Effect<Sled>& effect);
// The least loaded of `candidates` (fewest instances with a VMM), ties broken by id, leaving
// out expunged sleds and sleds whose agent does not answer. ServiceUnavailable if none is left.
Result<Uuid> PickSledIn(Tx& tx, const std::vector<Uuid>& candidates);

}  // namespace fp::db
