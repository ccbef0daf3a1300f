#include "app/sagas/vm_steps.h"

#include <chrono>
#include <thread>

#include "common/log.h"
#include "db/datastore.h"
#include "db/instances.h"
#include "nat/nat_reconciler.h"

namespace fp::app {

void LogBestEffort(std::string_view what, const Error& e) {
  LogEvent("warn", "best-effort saga step failed", {{"step", what}, {"error", e.message()}});
}

Result<VmStarted> EnsureRunningOn(SagaDeps& d, const Uuid& instance_id, const Uuid& sled_id) {
  agents::SledAgentClient* sled = FP_TRY(d.dataplane.Sled(sled_id));
  agents::InstanceSpec spec = FP_TRY(BuildInstanceSpec(d.ds, instance_id));
  // A removal of a leftover VM of this instance, judged before the placement committed, must
  // not land after the registration below: by this server (in memory), or by another (its
  // mark in the datastore, which expires if that server died amid the removal).
  d.dataplane.removals.AwaitNone(instance_id);
  for (;;) {
    auto removing = db::VmRemovalInProgress(d.ds, instance_id);
    if (!removing) return Fail(removing.error());
    if (!*removing) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  auto vm = sled->EnsureRunning(spec);
  if (!vm) {
    if (auto s = sled->Unregister(instance_id); !s) LogBestEffort("sled unregister", s.error());
    return Fail(vm.error());
  }
  return VmStarted{std::string(agents::ToString(vm->state))};
}

void UnregisterFrom(SagaDeps& d, const Uuid& instance_id, const Uuid& sled_id) {
  auto sled = d.dataplane.Sled(sled_id);
  if (!sled) return LogBestEffort("sled unregister", sled.error());
  if (auto s = (*sled)->Unregister(instance_id); !s) LogBestEffort("sled unregister", s.error());
}

void SyncNatBestEffort(SagaDeps& d) {
  if (auto s = d.nat.Sync(); !s) LogBestEffort("NAT sync", s.error());
}

}  // namespace fp::app
