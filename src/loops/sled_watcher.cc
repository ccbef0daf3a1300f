// The sled watcher's judgements (sled_watcher.h): a sled compared in full, an instance against
// its VM, orphan VMs removed. Its threads are in sled_watch_threads.cc, its reports in
// sled_reports.cc.

#include "loops/sled_watcher.h"

#include <chrono>
#include <map>
#include <set>

#include "common/log.h"
#include "db/external_ips.h"
#include "db/instances.h"
#include "db/sagas.h"
#include "db/vm_removals.h"
#include "loops/nat_reconciler.h"
#include "loops/port_reconciler.h"

namespace fp::loops {

namespace {

// The instance's run state that a VM's state on its sled means.
model::RunState RunStateOf(agents::VmState s) {
  switch (s) {
    case agents::VmState::kStarting:
      return model::RunState::kStarting;
    case agents::VmState::kRunning:
      return model::RunState::kRunning;
    case agents::VmState::kStopping:
      return model::RunState::kStopping;
    case agents::VmState::kStopped:
      return model::RunState::kStopped;
    case agents::VmState::kMigrating:
      return model::RunState::kMigrating;
    case agents::VmState::kFailed:
      return model::RunState::kFailed;
  }
  return model::RunState::kFailed;
}

// Whether recording `wanted` on the row judged as `judged` was declined because the row moved
// on since (InstanceRecordRunState's `judged_on` rule), as the row `now` it returned shows.
bool Outran(const model::Instance& judged, const model::Instance& now, model::RunState wanted) {
  return now.state == model::InstanceState::kVmm && !now.migration_id && now.run_state != wanted &&
         (now.sled_id != judged.sled_id || now.run_state != judged.run_state ||
          now.start_saga_id != judged.start_saga_id);
}

}  // namespace

int SledWatcher::SettleStopped(const model::Instance& instance, agents::SledAgentClient& sled,
                               model::RunState run_state, bool* outran,
                               const db::LeaseFence* fence) {
  // Judged: the lease may go to another server before the write (tests take it here).
  ds_.SyncPoint("sled_watcher:judged");
  auto recorded = db::InstanceRecordRunState(ds_, instance.id, run_state, &instance, fence);
  if (!recorded) {
    LogEvent("warn", "could not record run state",
             {{"instance", instance.id.ToString()}, {"error", recorded.error().message()}});
    return 0;
  }
  if (Outran(instance, *recorded, run_state)) {
    if (outran) *outran = true;
    return 0;
  }
  if (auto s = nat_.Sync(); !s) {
    LogEvent("warn", "NAT sync after stop failed", {{"error", s.error().message()}});
  }
  // Through the orphan check: a start may already have placed the instance again.
  auto sled_id = instance.sled_id;
  if (!sled_id) return 0;
  auto removed = RemoveIfOrphan(*sled_id, sled, instance.id, fence);
  if (!removed || *removed) return 0;
  LogEvent("warn", "sled unregister after stop failed; the reaper retries",
           {{"instance", instance.id.ToString()},
            {"sled_agent", sled.address()},
            {"error", removed->error().message()}});
  return 1;
}

std::optional<Status> SledWatcher::RemoveIfOrphan(const Uuid& sled_id,
                                                  agents::SledAgentClient& sled,
                                                  const Uuid& instance_id,
                                                  const db::LeaseFence* fence) {
  auto orphan = [&](const std::optional<model::Instance>& instance) {
    if (!instance) return true;
    // Both ends of a migration hold a VM until the migration saga settles which one stays.
    if (instance->migration_id) return false;
    return instance->state != model::InstanceState::kVmm || instance->sled_id != sled_id;
  };
  auto is_orphan = [&] {
    // A read first: most VMs are not orphans, and marking costs a commit.
    auto instance = db::InstanceAnyState(ds_, instance_id);
    if (!instance && instance.error().kind() != ErrorKind::kNotFound) return false;
    if (!orphan(instance ? std::optional<model::Instance>(*instance) : std::nullopt)) return false;
    // Judged again with the mark in one transaction, so that a placement by any server (its
    // EnsureRunningOn) that commits after it waits for this removal (VmRemovalInProgress).
    auto marked =
        db::VmRemovalBeginIf(ds_, instance_id, removal_holder_,
                             std::chrono::microseconds(kRemovalMarkTtl).count(), orphan, fence);
    return marked && *marked;
  };
  std::optional<Status> removed;
  sled_agents_.removals.RemoveIf(instance_id, is_orphan, [&] {
    removed = sled.Unregister(instance_id);
    if (auto ended = db::VmRemovalEnd(ds_, instance_id, removal_holder_); !ended) {
      LogEvent("warn", "could not clear a VM removal mark; it expires by itself",
               {{"instance", instance_id.ToString()}, {"error", ended.error().message()}});
    }
  });
  return removed;
}

int SledWatcher::ReapIfOrphan(const Uuid& sled_id, agents::SledAgentClient& sled,
                              const agents::SledInstance& vm, const db::LeaseFence* fence) {
  // E.g. a start whose sled call timed out and unwound, applied by the sled afterwards, or a
  // stopped or deleted instance whose unregister failed.
  auto removed = RemoveIfOrphan(sled_id, sled, vm.id, fence);
  if (!removed) return 0;
  if (*removed) {
    LogEvent("warn", "removed a VM the datastore does not place on this sled",
             {{"instance", vm.id.ToString()},
              {"state", agents::ToString(vm.state)},
              {"sled_agent", sled.address()}});
    return 0;
  }
  LogEvent("warn", "could not remove a VM the datastore does not place on this sled",
           {{"instance", vm.id.ToString()},
            {"sled_agent", sled.address()},
            {"error", removed->error().message()}});
  return 1;
}

SledWatcher::SledWatcher(db::Datastore& ds, SledAgents& sled_agents, NatReconciler& nat)
    : ds_(ds),
      sled_agents_(sled_agents),
      nat_(nat),
      removal_holder_(ds.random().NewUuid().ToString()) {}

void SledWatcher::ReapOrphans(const db::LeaseFence* fence) {
  for (const auto& [sled_id, sled] : sled_agents_.sleds) {
    // List the sled first, then read the datastore: a VM the sled already holds was placed by a
    // saga that committed before the read, so only true orphans are removed (VmRemovals covers
    // a placement racing the removal).
    auto vms = sled->List();
    if (!vms) {
      LogEvent("warn", "cannot list a sled's VMs", {{"error", vms.error().message()}});
      continue;
    }
    for (const agents::SledInstance& vm : *vms) (void)ReapIfOrphan(sled_id, *sled, vm, fence);
  }
}

bool SledWatcher::StartSagaAtRest(const model::Instance& i) {
  if (!i.start_saga_id) return true;
  auto state = db::SagaStateOf(ds_, *i.start_saga_id);
  if (!state) return false;  // cannot tell: the next look judges
  return !*state ||
         (**state != saga::SagaState::kRunning && **state != saga::SagaState::kUnwinding);
}

int SledWatcher::WatchInstance(const model::Instance& i, agents::SledAgentClient& sled,
                               const std::optional<agents::SledInstance>& vm,
                               const std::vector<model::ExternalIp>* ips, bool* outran,
                               const db::LeaseFence* fence) {
  if (i.state != model::InstanceState::kVmm || i.migration_id ||
      i.run_state == model::RunState::kRebooting) {
    return 0;
  }
  if (!vm) {
    // The sled does not know the VM. While the start saga runs, it may not have reached the
    // sled yet; once it is at rest, the VM it registered is gone (the sled restarted and lost
    // it) if the sled, asked after the saga's state was read, still lacks it.
    if (i.run_state == model::RunState::kStarting) {
      if (!StartSagaAtRest(i)) return 0;
      auto again = sled.Get(i.id);
      if (again || again.error().kind() != ErrorKind::kNotFound) return 0;  // the next look judges
    }
    return SettleStopped(i, sled, model::RunState::kFailed, outran, fence);
  }
  model::RunState state = RunStateOf(vm->state);
  if (state == model::RunState::kStopped || state == model::RunState::kFailed) {
    if (i.run_state == model::RunState::kStarting && !StartSagaAtRest(i))
      return 0;  // the saga still owns it
    return SettleStopped(i, sled, state, outran, fence);
  }
  if (state != i.run_state) {
    auto recorded = db::InstanceRecordRunState(ds_, i.id, state, &i, fence);
    // Not recorded (the datastore failed, or the lease went: the fence refused it): nothing is
    // done on its strength, the port neither; the next look judges again.
    if (!recorded) return 0;
    if (Outran(i, *recorded, state)) {
      if (outran) *outran = true;
      return 0;
    }
  }
  if (state != model::RunState::kRunning) return 0;
  if (ips) {
    ReconcilePort(i, *ips, sled, *vm);
  } else {
    ReconcilePort(ds_, i, sled, *vm);
  }
  return 0;
}

int SledWatcher::WatchSled(const Uuid& sled_id, agents::SledAgentClient& sled,
                           const db::LeaseFence* fence) {
  // The datastore first, then the sled: what the sled says is at least as new as the row.
  auto instances = db::InstancesOnSled(ds_, sled_id);
  if (!instances) return 0;
  auto vms = sled.List();
  if (!vms) return 1;
  std::map<Uuid, const agents::SledInstance*> on_sled;
  for (const agents::SledInstance& vm : *vms) on_sled.emplace(vm.id, &vm);
  // The ports' addresses, read after the sled's list (see ReconcilePort), in one read.
  auto ips = db::ExternalIpsOnSled(ds_, sled_id);
  if (!ips) return 0;
  static const std::vector<model::ExternalIp> kNone;
  std::set<Uuid> placed;
  int failures = 0;
  for (const model::Instance& i : *instances) {
    if (i.state != model::InstanceState::kVmm) continue;
    placed.insert(i.id);
    auto it = on_sled.find(i.id);
    auto held = ips->find(i.id);
    failures += WatchInstance(
        i, sled,
        it == on_sled.end() ? std::nullopt : std::optional<agents::SledInstance>(*it->second),
        held == ips->end() ? &kNone : &held->second, nullptr, fence);
  }
  // A VM not among the instances read is an orphan, or was placed since the read (checked
  // again, with a fresh read, before anything is removed).
  for (const agents::SledInstance& vm : *vms) {
    if (!placed.contains(vm.id)) failures += ReapIfOrphan(sled_id, sled, vm, fence);
  }
  return failures;
}

void SledWatcher::WatchOnce() {
  const std::optional<db::LeaseFence> fence = LookFence();
  for (const auto& [sled_id, sled] : sled_agents_.sleds) {
    (void)WatchSled(sled_id, *sled, fence ? &*fence : nullptr);
  }
}

std::optional<db::LeaseFence> SledWatcher::LookFence() const {
  if (!lease_) return std::nullopt;
  return lease_->fence();
}

}  // namespace fp::loops
