#pragma once

// Steps the instance sagas share: putting an instance's VM on a sled and taking it off, and
// the best-effort pushes of their undo steps. Dataplane undo steps are best effort: they log
// and succeed when an agent cannot be reached, because the NAT reconciler and the sled watcher
// converge that state anyway; database undo steps are strict.

#include <string>
#include <string_view>

#include "app/sagas/json.h"
#include "app/sagas/sagas.h"

namespace fp::app {

// The output of a node that started a VM: the state the sled answered with.
struct VmStarted {
  std::string state;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(VmStarted, state)

// Logs a best-effort step that failed (the saga goes on).
void LogBestEffort(std::string_view what, const Error& e);

// Starts the instance on `sled_id` or, if that fails, leaves nothing behind on the sled (a
// failed action must have no effect: it is never undone). Waits first for a removal of a
// leftover VM of this instance (VmRemovals). Errors: ServiceUnavailable for an unknown sled,
// those of BuildInstanceSpec and of the sled's answer.
Result<VmStarted> EnsureRunningOn(SagaDeps& d, const Uuid& instance_id, const Uuid& sled_id);

// Removes the instance's VM from the sled, best effort.
void UnregisterFrom(SagaDeps& d, const Uuid& instance_id, const Uuid& sled_id);

// Pushes the NAT table to the switch, best effort (the reconciler retries).
void SyncNatBestEffort(SagaDeps& d);

}  // namespace fp::app
