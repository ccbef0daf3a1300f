#include "app/sagas/vm_steps.h"

#include <fmt/format.h>

#include <chrono>

#include "common/log.h"
#include "db/datastore.h"
#include "db/instances.h"
#include "db/vm_removals.h"
#include "loops/nat_reconciler.h"
#include "loops/sled_agents.h"
#include "loops/sled_watcher.h"

namespace fp::app {

namespace {
// How long a placement waits for a removal of the instance's previous VM: the mark's TTL, and
// as long again for the removal itself.
constexpr std::chrono::seconds kRemovalWait = 2 * loops::SledWatcher::kRemovalMarkTtl;
}  // namespace

agents::CallContext CallFor(const saga::ActionContext& ctx) {
  agents::CallContext call{.saga_id = ctx.saga_id().ToString()};
  // Run by its request: the id at hand. Else (resumed after a restart) the origin as
  // db::RequestSaga describes it; anything else names no request.
  if (!ctx.request_id().empty()) {
    call.request_id = std::string(ctx.request_id());
    return call;
  }
  saga::Json origin = saga::Json::parse(ctx.origin(), nullptr, /*allow_exceptions=*/false);
  if (origin.is_object() && origin.contains("request_id") && origin["request_id"].is_string()) {
    call.request_id = origin["request_id"].get<std::string>();
  }
  return call;
}

void LogBestEffort(const saga::ActionContext& ctx, std::string_view what, const Error& e) {
  agents::CallContext call = CallFor(ctx);
  saga::Json fields{{"step", what}, {"error", e.message()}, {"saga_id", call.saga_id}};
  if (!call.request_id.empty()) fields["request_id"] = call.request_id;
  LogEvent("warn", "best-effort saga step failed", fields);
}

Result<VmStarted> EnsureRunningOn(SagaDeps& d, const saga::ActionContext& ctx,
                                  const Uuid& instance_id, const Uuid& sled_id) {
  agents::SledAgentClient* sled = FP_TRY(d.sled_agents.Sled(sled_id));
  agents::InstanceSpec spec = FP_TRY(loops::BuildInstanceSpec(d.ds, instance_id));
  // A removal of a leftover VM of this instance, judged before the placement committed, must
  // not land after the registration below: by this server (in memory), or by another (its
  // mark in the datastore, which expires if that server died amid the removal).
  // A mark outlives its holder by at most its TTL (10 s): past kRemovalWait something else is
  // wrong, and the step fails (Unavailable) rather than hold the saga forever.
  d.sled_agents.removals.AwaitNone(instance_id);
  const Clock& clock = d.ds.clock();
  const MonoTime deadline = clock.Deadline(kRemovalWait);
  for (;;) {
    auto removing = db::VmRemovalInProgress(d.ds, instance_id);
    if (!removing) return Fail(removing.error());
    if (!*removing) break;
    if (clock.Monotonic() >= deadline) {
      return Fail(Error::Unavailable(fmt::format(
          "a removal of instance {}'s previous VM is still marked in progress after {} s; "
          "try again",
          instance_id.ToString(), kRemovalWait.count())));
    }
    clock.SleepFor(std::chrono::milliseconds(5));
  }
  const agents::CallContext call = CallFor(ctx);
  auto vm = sled->EnsureRunning(spec, call);
  if (!vm) {
    if (auto s = sled->Unregister(instance_id, call); !s) {
      LogBestEffort(ctx, "sled unregister", s.error());
    }
    return Fail(vm.error());
  }
  return VmStarted{std::string(agents::ToString(vm->state))};
}

void UnregisterFrom(SagaDeps& d, const saga::ActionContext& ctx, const Uuid& instance_id,
                    const Uuid& sled_id) {
  auto sled = d.sled_agents.Sled(sled_id);
  if (!sled) return LogBestEffort(ctx, "sled unregister", sled.error());
  if (auto s = (*sled)->Unregister(instance_id, CallFor(ctx)); !s) {
    LogBestEffort(ctx, "sled unregister", s.error());
  }
}

void SyncNatBestEffort(SagaDeps& d, const saga::ActionContext& ctx) {
  if (auto s = d.nat.Sync(CallFor(ctx)); !s) LogBestEffort(ctx, "NAT sync", s.error());
}

}  // namespace fp::app
