#include "app/sled_watcher.h"

#include <chrono>

#include "app/port_reconciler.h"
#include "common/log.h"
#include "db/instances.h"
#include "db/leases.h"
#include "nat/nat_reconciler.h"

namespace fp::app {

void SledWatcher::SettleStopped(const model::Instance& instance, agents::SledAgentClient& sled,
                                const std::string& run_state) {
  auto recorded = db::InstanceRecordRunState(ds_, instance.id, run_state);
  if (!recorded) {
    LogEvent("warn", "could not record run state",
             {{"instance", instance.id.ToString()}, {"error", recorded.error().message()}});
    return;
  }
  if (auto s = nat_.Sync(); !s) {
    LogEvent("warn", "NAT sync after stop failed", {{"error", s.error().message()}});
  }
  // Through the orphan check: a start may already have placed the instance again.
  auto sled_id = instance.sled_id;
  if (!sled_id) return;
  if (auto removed = RemoveIfOrphan(*sled_id, sled, instance.id); removed && !*removed) {
    LogEvent("warn", "sled unregister after stop failed; the reaper retries",
             {{"instance", instance.id.ToString()},
              {"sled_agent", sled.address()},
              {"error", removed->error().message()}});
  }
}

std::optional<Status> SledWatcher::RemoveIfOrphan(const Uuid& sled_id,
                                                  agents::SledAgentClient& sled,
                                                  const Uuid& instance_id) {
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
    auto marked = db::VmRemovalBeginIf(ds_, instance_id, removal_holder_,
                                       std::chrono::microseconds(kRemovalMarkTtl).count(), orphan);
    return marked && *marked;
  };
  std::optional<Status> removed;
  dataplane_.removals.RemoveIf(instance_id, is_orphan, [&] {
    removed = sled.Unregister(instance_id);
    if (auto ended = db::VmRemovalEnd(ds_, instance_id, removal_holder_); !ended) {
      LogEvent("warn", "could not clear a VM removal mark; it expires by itself",
               {{"instance", instance_id.ToString()}, {"error", ended.error().message()}});
    }
  });
  return removed;
}

void SledWatcher::ReapOrphans() {
  for (const auto& [sled_id, sled] : dataplane_.sleds) {
    // List the sled first, then read the datastore: a VM the sled already holds was placed by a
    // saga that committed before the read, so only true orphans are removed (VmRemovals covers
    // a placement racing the removal).
    auto vms = sled->List();
    if (!vms) {
      LogEvent("warn", "cannot list a sled's VMs", {{"error", vms.error().message()}});
      continue;
    }
    for (const agents::SledInstance& vm : *vms) {
      // E.g. a start whose sled call timed out and unwound, applied by the sled afterwards, or a
      // stopped or deleted instance whose unregister failed.
      auto removed = RemoveIfOrphan(sled_id, *sled, vm.id);
      if (!removed) continue;
      if (*removed) {
        LogEvent("warn", "removed a VM the datastore does not place on this sled",
                 {{"instance", vm.id.ToString()},
                  {"state", agents::ToString(vm.state)},
                  {"sled_agent", sled->address()}});
      } else {
        LogEvent("warn", "could not remove a VM the datastore does not place on this sled",
                 {{"instance", vm.id.ToString()},
                  {"sled_agent", sled->address()},
                  {"error", removed->error().message()}});
      }
    }
  }
}

void SledWatcher::WatchOnce() {
  ReapOrphans();
  auto instances = db::InstancesWithVmm(ds_);
  if (!instances) return;
  for (const model::Instance& i : *instances) {
    if (!i.sled_id || i.migration_id || i.run_state == "rebooting") continue;
    auto sled = dataplane_.Sled(*i.sled_id);
    if (!sled) continue;
    auto vm = (*sled)->Get(i.id);
    if (!vm) {
      // The sled does not know the VM. While starting, the start saga may not have reached the
      // sled yet; afterwards the VM is gone (the sled restarted and lost it).
      if (vm.error().kind() == ErrorKind::kNotFound && i.run_state != "starting") {
        SettleStopped(i, **sled, "failed");
      }
      continue;
    }
    std::string state(agents::ToString(vm->state));
    if (state == "stopped" || state == "failed") {
      if (i.run_state == "starting") continue;  // a start saga still owns this instance
      SettleStopped(i, **sled, state);
      continue;
    }
    if (state != i.run_state) (void)db::InstanceRecordRunState(ds_, i.id, state);
    if (state == "running") ReconcilePort(ds_, i, **sled, *vm);
  }
}

void SledWatcher::Start(int period_ms, db::TaskLeaseKeeper* lease) {
  thread_ = std::thread([this, period_ms, lease] {
    std::unique_lock lock(mu_);
    while (!stop_) {
      lock.unlock();
      // With several servers, one watches at a time.
      if (!lease || lease->Held()) WatchOnce();
      lock.lock();
      cv_.wait_for(lock, std::chrono::milliseconds(period_ms), [&] { return stop_ || now_; });
      now_ = false;
    }
  });
}

void SledWatcher::Wake() {
  {
    std::lock_guard lock(mu_);
    now_ = true;
  }
  cv_.notify_all();
}

void SledWatcher::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace fp::app
