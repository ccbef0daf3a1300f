#include "app/sled_watcher.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "app/port_reconciler.h"
#include "common/log.h"
#include "db/external_ips.h"
#include "db/instances.h"
#include "db/leases.h"
#include "db/sagas.h"
#include "nat/nat_reconciler.h"

namespace fp::app {

namespace {
// Removals and listings that failed on this thread: a sled's thread that sees it grow during a
// pass compares that sled again soon rather than a full period later.
thread_local int64_t tl_failures = 0;
}  // namespace

void SledWatcher::SettleStopped(const model::Instance& instance, agents::SledAgentClient& sled,
                                const std::string& run_state) {
  auto recorded = db::InstanceRecordRunState(ds_, instance.id, run_state, &instance);
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
    ++tl_failures;
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

void SledWatcher::ReapIfOrphan(const Uuid& sled_id, agents::SledAgentClient& sled,
                               const agents::SledInstance& vm) {
  // E.g. a start whose sled call timed out and unwound, applied by the sled afterwards, or a
  // stopped or deleted instance whose unregister failed.
  auto removed = RemoveIfOrphan(sled_id, sled, vm.id);
  if (!removed) return;
  if (*removed) {
    LogEvent("warn", "removed a VM the datastore does not place on this sled",
             {{"instance", vm.id.ToString()},
              {"state", agents::ToString(vm.state)},
              {"sled_agent", sled.address()}});
  } else {
    ++tl_failures;
    LogEvent("warn", "could not remove a VM the datastore does not place on this sled",
             {{"instance", vm.id.ToString()},
              {"sled_agent", sled.address()},
              {"error", removed->error().message()}});
  }
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
    for (const agents::SledInstance& vm : *vms) ReapIfOrphan(sled_id, *sled, vm);
  }
}

bool SledWatcher::StartSagaAtRest(const model::Instance& i) {
  if (!i.start_saga_id) return true;
  auto state = db::SagaStateOf(ds_, *i.start_saga_id);
  if (!state) return false;  // cannot tell: the next look judges
  return !*state ||
         (**state != saga::SagaState::kRunning && **state != saga::SagaState::kUnwinding);
}

void SledWatcher::WatchInstance(const model::Instance& i, agents::SledAgentClient& sled,
                                const std::optional<agents::SledInstance>& vm,
                                const std::vector<model::ExternalIp>* ips) {
  if (i.state != model::InstanceState::kVmm || i.migration_id || i.run_state == "rebooting") {
    return;
  }
  if (!vm) {
    // The sled does not know the VM. While the start saga runs, it may not have reached the
    // sled yet; once it is at rest, the VM it registered is gone (the sled restarted and lost
    // it) if the sled, asked after the saga's state was read, still lacks it.
    if (i.run_state == "starting") {
      if (!StartSagaAtRest(i)) return;
      auto again = sled.Get(i.id);
      if (again || again.error().kind() != ErrorKind::kNotFound) return;  // the next look judges
    }
    SettleStopped(i, sled, "failed");
    return;
  }
  std::string state(agents::ToString(vm->state));
  if (state == "stopped" || state == "failed") {
    if (i.run_state == "starting" && !StartSagaAtRest(i)) return;  // the saga still owns it
    SettleStopped(i, sled, state);
    return;
  }
  if (state != i.run_state) (void)db::InstanceRecordRunState(ds_, i.id, state, &i);
  if (state != "running") return;
  if (ips) {
    ReconcilePort(i, *ips, sled, *vm);
  } else {
    ReconcilePort(ds_, i, sled, *vm);
  }
}

void SledWatcher::WatchSled(const Uuid& sled_id, agents::SledAgentClient& sled) {
  // The datastore first, then the sled: what the sled says is at least as new as the row.
  auto instances = db::InstancesOnSled(ds_, sled_id);
  if (!instances) return;
  auto vms = sled.List();
  if (!vms) {
    ++tl_failures;
    return;
  }
  std::map<Uuid, const agents::SledInstance*> on_sled;
  for (const agents::SledInstance& vm : *vms) on_sled.emplace(vm.id, &vm);
  // The ports' addresses, read after the sled's list (see ReconcilePort), in one read.
  auto ips = db::ExternalIpsOnSled(ds_, sled_id);
  if (!ips) return;
  static const std::vector<model::ExternalIp> kNone;
  std::set<Uuid> placed;
  for (const model::Instance& i : *instances) {
    if (i.state != model::InstanceState::kVmm) continue;
    placed.insert(i.id);
    auto it = on_sled.find(i.id);
    auto held = ips->find(i.id);
    WatchInstance(
        i, sled,
        it == on_sled.end() ? std::nullopt : std::optional<agents::SledInstance>(*it->second),
        held == ips->end() ? &kNone : &held->second);
  }
  // A VM not among the instances read is an orphan, or was placed since the read (checked
  // again, with a fresh read, before anything is removed).
  for (const agents::SledInstance& vm : *vms) {
    if (!placed.contains(vm.id)) ReapIfOrphan(sled_id, sled, vm);
  }
}

void SledWatcher::ApplyReport(const Uuid& sled_id, agents::SledAgentClient& sled,
                              const agents::SledReport& report) {
  std::set<Uuid> ids;
  for (const agents::SledInstance& vm : report.instances) ids.insert(vm.id);
  ids.insert(report.removed.begin(), report.removed.end());
  for (const Uuid& id : ids) {
    auto instance = db::InstanceAnyState(ds_, id);
    if (!instance && instance.error().kind() != ErrorKind::kNotFound) continue;
    bool here =
        instance && instance->sled_id == sled_id && instance->state == model::InstanceState::kVmm;
    // What the sled holds now, asked after the datastore read (see WatchSled).
    auto vm = sled.Get(id);
    if (!vm && vm.error().kind() != ErrorKind::kNotFound) continue;  // the next pass judges
    if (here) {
      WatchInstance(*instance, sled, vm ? std::optional<agents::SledInstance>(*vm) : std::nullopt);
    } else if (vm) {
      ReapIfOrphan(sled_id, sled, *vm);
    }
  }
}

void SledWatcher::WatchOnce() {
  for (const auto& [sled_id, sled] : dataplane_.sleds) WatchSled(sled_id, *sled);
}

bool SledWatcher::Pause(std::chrono::milliseconds d) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, d, [&] { return stop_; });
  return !stop_;
}

void SledWatcher::WatchLoop(size_t index, const Uuid& sled_id, agents::SledAgentClient& sled) {
  using Clock = std::chrono::steady_clock;
  std::string boot;   // the run of the sled's agent the feed follows; empty: none yet
  int64_t since = 0;  // the last generation of that run applied
  auto next_full = Clock::now();
  // After a pass where something failed (a removal the sled refused), the next comes after
  // this, doubling up to the full period; after a clean pass, a full period later.
  auto retry = options_.retry;
  auto schedule = [&](int64_t failures_before) {
    if (tl_failures == failures_before) {
      retry = options_.retry;
      next_full = Clock::now() + options_.full_period;
    } else {
      next_full = Clock::now() + retry;
      retry = std::min(retry * 2, options_.full_period);
    }
  };
  auto set_status = [&](bool reachable, bool reported) {
    std::lock_guard lock(mu_);
    SledWatchStatus& s = status_[index];
    if (reachable && !s.reachable && s.reports > 0) {
      LogEvent("info", "sled agent answers again", {{"sled_agent", sled.address()}});
    }
    s.reachable = reachable;
    if (reported) {
      s.last_report = ds_.clock().Now();
      ++s.reports;
    }
  };
  while (Pause(std::chrono::milliseconds(0))) {
    // With several servers, one watches at a time; the next holder starts from a full list.
    if (lease_ && !lease_->Held()) {
      boot.clear();
      Pause(options_.full_period);
      continue;
    }
    if (Clock::now() >= next_full) {
      int64_t failures = tl_failures;
      WatchSled(sled_id, sled);
      schedule(failures);
    }
    auto wait = std::min(options_.report_wait,
                         std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::max(next_full - Clock::now(), Clock::duration::zero())));
    auto report = sled.Changes(boot, since, wait);
    if (!report && !Pause(std::chrono::milliseconds(0))) break;  // abandoned by Stop
    if (!report) {
      bool was_reachable;
      {
        std::lock_guard lock(mu_);
        was_reachable = status_[index].reachable || status_[index].reports == 0;
      }
      if (was_reachable) {
        LogEvent("warn", "sled agent does not report; retrying",
                 {{"sled_agent", sled.address()}, {"error", report.error().message()}});
      }
      set_status(false, false);
      boot.clear();  // it may come back as a new run
      Pause(options_.retry);
      continue;
    }
    if (report->full) {
      if (!boot.empty() && report->boot_id != boot) {
        std::lock_guard lock(mu_);
        ++status_[index].restarts_seen;
      }
      if (!boot.empty()) {
        LogEvent("info", "sled agent restarted or the watcher fell behind; comparing in full",
                 {{"sled_agent", sled.address()}});
      }
      // Judged as a full comparison does (the datastore read first): the report's list is older
      // than a read made now.
      int64_t failures = tl_failures;
      WatchSled(sled_id, sled);
      schedule(failures);
    } else {
      int64_t failures = tl_failures;
      ApplyReport(sled_id, sled, *report);
      if (tl_failures != failures) schedule(failures);
    }
    boot = report->boot_id;
    since = report->generation;
    set_status(true, true);  // counted once applied
  }
}

void SledWatcher::Start(SledWatchOptions options, db::TaskLeaseKeeper* lease) {
  options_ = options;
  lease_ = lease;
  {
    std::lock_guard lock(mu_);
    for (const auto& [sled_id, sled] : dataplane_.sleds) {
      status_.push_back(SledWatchStatus{.sled_id = sled_id, .address = sled->address()});
    }
  }
  size_t index = 0;
  for (const auto& [sled_id, sled] : dataplane_.sleds) {
    threads_.emplace_back(
        [this, index, id = sled_id, client = sled] { WatchLoop(index, id, *client); });
    ++index;
  }
  threads_.emplace_back([this] {
    std::unique_lock lock(mu_);
    while (!stop_) {
      cv_.wait(lock, [&] { return stop_ || now_; });
      if (stop_) break;
      now_ = false;
      lock.unlock();
      if (!lease_ || lease_->Held()) ReapOrphans();
      lock.lock();
    }
  });
}

std::vector<SledWatchStatus> SledWatcher::SledStatuses() const {
  std::lock_guard lock(mu_);
  return status_;
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
  // A report call waits up to report_wait for a change: end it now.
  if (!threads_.empty()) {
    for (const auto& [sled_id, sled] : dataplane_.sleds) sled->AbandonReports();
  }
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

}  // namespace fp::app
