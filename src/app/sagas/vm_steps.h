#pragma once

// Steps the instance sagas share: putting an instance's VM on a sled and taking it off, and
// the best-effort pushes of their undo steps. Dataplane undo steps are best effort: they log
// and succeed when an agent cannot be reached, because the NAT reconciler and the sled watcher
// converge that state anyway; database undo steps are strict.

#include <string>
#include <string_view>

#include "agents/agents.h"
#include "app/sagas/json.h"
#include "app/sagas/sagas.h"

namespace fp::app {

// The output of a node that started a VM: the state the sled answered with.
struct VmStarted {
  std::string state;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(VmStarted, state)

// Whom a saga's agent calls are made for: the request that started it (its origin, if a
// request did) and the saga itself.
agents::CallContext CallFor(const saga::ActionContext& ctx);

// Logs a best-effort step that failed (the saga goes on), naming the saga and its request.
void LogBestEffort(const saga::ActionContext& ctx, std::string_view what, const Error& e);

// Starts the instance on `sled_id` or, if that fails, leaves nothing behind on the sled (a
// failed action must have no effect: it is never undone). Waits first for a removal of a
// leftover VM of this instance (VmRemovals). Errors: ServiceUnavailable for an unknown sled,
// those of BuildInstanceSpec and of the sled's answer.
Result<VmStarted> EnsureRunningOn(SagaDeps& d, const saga::ActionContext& ctx,
                                  const Uuid& instance_id, const Uuid& sled_id);

// Removes the instance's VM from the sled, best effort.
void UnregisterFrom(SagaDeps& d, const saga::ActionContext& ctx, const Uuid& instance_id,
                    const Uuid& sled_id);

// Pushes the NAT table to the switch, best effort (the reconciler retries).
void SyncNatBestEffort(SagaDeps& d, const saga::ActionContext& ctx);

}  // namespace fp::app
