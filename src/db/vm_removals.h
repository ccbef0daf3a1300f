#pragma once

// Removals of orphan VMs (vm_removals.cc), ordered against placements on every server
// (migration 7): a sled watcher marks the removal of a VM in the transaction that judges it an
// orphan, and a placement waits for the mark before it registers the VM.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "db/datastore.h"
#include "db/lease_fence.h"
#include "model/instances.h"

namespace fp::db {

// In one write transaction: reads the instance (live or deleted; nullopt if none) and, if
// `is_orphan` says its VM on the sled at hand is an orphan, marks a removal of its VM in
// progress by `holder` until now + `ttl_us`. Returns whether it marked (false also when another
// removal of it is in progress). A placement that commits after this transaction waits for the
// mark (VmRemovalInProgress) before it registers the VM, so the removal never lands after it.
// With `fence`, nothing is marked (ServiceUnavailable) once its holder no longer holds its lease.
Result<bool> VmRemovalBeginIf(Datastore& ds, const Uuid& instance_id, const std::string& holder,
                              int64_t ttl_us,
                              const std::function<bool(const std::optional<Instance>&)>& is_orphan,
                              const LeaseFence* fence = nullptr);
// The removal is over (it reached the sled or failed): drops `holder`'s mark.
Status VmRemovalEnd(Datastore& ds, const Uuid& instance_id, const std::string& holder);
// Whether a removal of the instance's VM is marked in progress and its mark has not expired.
Result<bool> VmRemovalInProgress(Datastore& ds, const Uuid& instance_id);

}  // namespace fp::db
