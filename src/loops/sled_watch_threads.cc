// The sled watcher's threads (sled_watcher.h): one per sled (its reports and full comparisons),
// the lease's, the one for sleds no agent of this server serves, and the reaper's; and what a
// silent sled's instances come to.

#include <algorithm>
#include <chrono>

#include "common/log.h"
#include "common/thread_name.h"
#include "db/instances.h"
#include "db/leases.h"
#include "db/sleds.h"
#include "loops/nat_reconciler.h"
#include "loops/sled_watcher.h"

namespace fp::loops {

void SledWatcher::FailInstancesOfSilentSled(const Uuid& sled_id, const std::string& agent,
                                            const db::LeaseFence* fence) {
  auto instances = db::InstancesOnSled(ds_, sled_id);
  if (!instances) return;
  int64_t failed = 0;
  for (const model::Instance& i : *instances) {
    // A migration or a start in progress is its saga's, and a reboot its request's: their own
    // calls to the silent sled fail and unwind them (a failed reboot puts the instance back
    // to running, which the next check here fails).
    if (i.state != model::InstanceState::kVmm || i.migration_id ||
        i.run_state == model::RunState::kRebooting) {
      continue;
    }
    if (i.run_state == model::RunState::kStarting && !StartSagaAtRest(i)) continue;
    auto recorded = db::InstanceRecordRunState(ds_, i.id, model::RunState::kFailed, &i, fence);
    if (recorded && recorded->state == model::InstanceState::kFailed) ++failed;
  }
  if (failed == 0) return;
  LogEvent("warn", "sled agent has not answered for too long; its instances are failed",
           {{"sled_agent", agent},
            {"sled_id", sled_id.ToString()},
            {"instances", failed},
            {"unresponsive_after_ms", options_.unresponsive_after.count()}});
  if (auto s = nat_.Sync(); !s) {
    LogEvent("warn", "NAT sync after failing instances failed", {{"error", s.error().message()}});
  }
}

bool SledWatcher::Pause(std::chrono::milliseconds d) {
  MutexLock lock(mu_);
  ds_.clock().WaitFor(lock, cv_, d, [&]() FP_REQUIRES(mu_) { return stop_; });
  return !stop_;
}

void SledWatcher::KeepLease() {
  const auto period =
      std::max(std::chrono::milliseconds(10), std::chrono::milliseconds(lease_->ttl_us() / 8000));
  bool held = false;
  do {
    const bool now_held = lease_->Held();
    if (now_held != held) {
      held = now_held;
      LogEvent("info",
               held ? "this server watches the sleds now (it holds the sled-watcher lease)"
                    : "this server no longer watches the sleds (it lost the sled-watcher lease)",
               {{"lease_ttl_ms", lease_->ttl_us() / 1000}});
    }
    if (held) {
      {
        MutexLock lock(mu_);
        ++lease_held_looks_;
      }
      cv_.notify_all();
    }
  } while (Pause(period));
}

bool SledWatcher::MayWatch() {
  if (!lease_) return true;
  int64_t looks;
  {
    MutexLock lock(mu_);
    looks = lease_held_looks_;
  }
  if (lease_->Held()) return true;
  // Counted before the look above: a KeepLease look that found the lease held since ends the
  // wait, however close behind this one it came.
  MutexLock lock(mu_);
  ds_.clock().WaitFor(lock, cv_, options_.full_period,
                      [&]() FP_REQUIRES(mu_) { return stop_ || lease_held_looks_ != looks; });
  return false;
}

void SledWatcher::WatchLoop(size_t index, const Uuid& sled_id, agents::SledAgentClient& sled) {
  const Clock& clock = ds_.clock();
  std::string boot;   // the run of the sled's agent the feed follows; empty: none yet
  int64_t since = 0;  // the last generation of that run applied
  auto next_full = clock.Monotonic();
  // After a pass where something failed (a removal the sled refused), the next comes after
  // this, doubling up to the full period; after a clean pass, a full period later.
  auto retry = options_.retry;
  auto schedule = [&](int failures) {
    if (failures == 0) {
      retry = options_.retry;
      next_full = clock.Monotonic() + options_.full_period;
    } else {
      next_full = clock.Monotonic() + retry;
      retry = std::min(retry * 2, options_.full_period);
    }
  };
  // The lease's fence as this look began (see LookFence), carried by its writes.
  std::optional<db::LeaseFence> look;
  auto fence = [&] { return look ? &*look : nullptr; };
  // Whether the sled answers, as last recorded in the datastore by this thread (nullopt: not
  // yet, or the write failed: tried again at the next call).
  std::optional<bool> recorded;
  // Since when its calls fail (nullopt while it answers), and when its instances were last
  // checked for failing (see unresponsive_after).
  std::optional<MonoTime> silent_since;
  auto next_silent_check = clock.Monotonic();
  auto set_status = [&](bool reachable, bool reported) {
    {
      MutexLock lock(mu_);
      SledWatchStatus& s = status_[index];
      if (reachable && !s.reachable && s.reports > 0) {
        LogEvent("info", "sled agent answers again", {{"sled_agent", sled.address()}});
      }
      s.reachable = reachable;
      if (reported) {
        s.last_report = ds_.clock().Now();
        ++s.reports;
      }
    }
    if (reachable) silent_since.reset();
    if (!reachable && !silent_since) silent_since = clock.Monotonic();
    // Silent is recorded (and keeps placements off the sled) once it has lasted kSilentAfter:
    // one call that failed is no reason to move work elsewhere.
    const bool answers = reachable || clock.Monotonic() - *silent_since < kSilentAfter;
    if (recorded != answers) {
      auto written = db::SledRecordAgent(ds_, sled_id, answers, fence());
      recorded = written ? std::optional<bool>(answers) : std::nullopt;
    }
    if (!reachable && clock.Monotonic() - *silent_since >= options_.unresponsive_after &&
        clock.Monotonic() >= next_silent_check) {
      next_silent_check = clock.Monotonic() + options_.full_period;
      bool all_silent;
      {
        MutexLock lock(mu_);
        all_silent = status_.size() > 1 && std::none_of(status_.begin(), status_.end(),
                                                        [](const auto& s) { return s.reachable; });
      }
      if (all_silent) {
        // More likely this server is cut off from the sleds than every sled lost at once:
        // failing every instance of the rack on that guess would be worse than waiting.
        LogEvent("warn",
                 "no sled answers this server; their instances are left as they are until one "
                 "does",
                 {{"sled_agent", sled.address()}});
      } else {
        FailInstancesOfSilentSled(sled_id, sled.address(), fence());
      }
    }
  };
  // With several servers, one watches at a time. Once this one does not: its next turn starts
  // from a full list, and judges afresh whether the sled answers (another server watched
  // meanwhile and recorded what it saw).
  auto forget = [&] {
    boot.clear();
    recorded.reset();
    silent_since.reset();
  };
  bool confirmed_only = false;  // the last report only confirmed (see confirmation_linger)
  while (Pause(std::chrono::milliseconds(0))) {
    if (!MayWatch()) {
      forget();
      continue;
    }
    look = LookFence();  // before the report call: what comes back is judged under it
    if (clock.Monotonic() >= next_full) schedule(WatchSled(sled_id, sled, fence()));
    auto wait = std::min(options_.report_wait,
                         std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::max(next_full - clock.Monotonic(), MonoDuration::zero())));
    auto report = sled.Changes(boot, since, wait);
    if (!report && !Pause(std::chrono::milliseconds(0))) break;  // abandoned by Stop
    // The call waited up to report_wait, longer than the lease lasts. A server that lost the
    // lease meanwhile leaves what came back to the holder, which calls the sled itself: a
    // report (states to record, VMs to take off) and a failure alike (the sled recorded
    // silent, its instances failed). So does one that lost it and took it back (a new tenure):
    // this look's writes would all be refused, and its next starts from a full list.
    if (lease_ && (!lease_->Held() || lease_->fence().holder != look->holder)) {
      {
        MutexLock lock(mu_);
        ++status_[index].calls_set_aside;
      }
      LogEvent("info",
               "a sled's report call returned after this server lost the sled-watcher lease (or "
               "in a later tenure of it); its answer is left to the lease's holder, or to this "
               "server's next look from a full list",
               {{"sled_agent", sled.address()}, {"answered", report.has_value()}});
      forget();
      continue;
    }
    if (!report) {
      bool was_reachable;
      {
        MutexLock lock(mu_);
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
        MutexLock lock(mu_);
        ++status_[index].restarts_seen;
      }
      if (!boot.empty()) {
        LogEvent("info", "sled agent restarted or the watcher fell behind; comparing in full",
                 {{"sled_agent", sled.address()}});
      }
      // Judged as a full comparison does (the datastore read first): the report's list is older
      // than a read made now.
      schedule(WatchSled(sled_id, sled, fence()));
    } else if (int failures = ApplyReport(sled_id, sled, *report, &confirmed_only, fence());
               failures > 0) {
      schedule(failures);
    }
    boot = report->boot_id;
    since = report->generation;
    set_status(true, true);  // counted once applied
    if (!report->full && confirmed_only && !report->instances.empty() &&
        !Pause(options_.confirmation_linger)) {
      break;
    }
  }
}

void SledWatcher::WatchUnservedSleds(const std::vector<model::Sled>& unserved) {
  const Clock& clock = ds_.clock();
  // When this thread recorded each sled silent: its deadline counts from there, so a server
  // that waits for the task lease does not fail instances the moment it gets it.
  std::map<Uuid, MonoTime> silent_from;
  while (Pause(std::chrono::milliseconds(0))) {
    if (!MayWatch()) {
      silent_from.clear();  // another server may have judged them meanwhile
      continue;
    }
    const std::optional<db::LeaseFence> look = LookFence();
    const db::LeaseFence* fence = look ? &*look : nullptr;
    auto wait = MonoDuration(options_.full_period);
    for (const model::Sled& s : unserved) {
      auto since = silent_from.find(s.id);
      if (since == silent_from.end()) {
        if (!db::SledRecordAgent(ds_, s.id, false, fence)) continue;  // tried again next pass
        since = silent_from.emplace(s.id, clock.Monotonic()).first;
      }
      const auto deadline = since->second + options_.unresponsive_after;
      if (clock.Monotonic() >= deadline) {
        FailInstancesOfSilentSled(s.id, s.agent_url, fence);
      } else {
        wait = std::min(wait, MonoDuration(deadline - clock.Monotonic()));
      }
    }
    Pause(std::chrono::duration_cast<std::chrono::milliseconds>(wait) +
          std::chrono::milliseconds(1));
  }
}

void SledWatcher::Start(SledWatchOptions options, db::TaskLeaseKeeper* lease) {
  options_ = options;
  lease_ = lease;
  if (lease_) {
    threads_.emplace_back([this] {
      NameThisThread("sled-lease");
      KeepLease();
    });
  }
  // Sleds the datastore knows that no agent of this server serves (an agent retired, or
  // moved without a --serial): nothing will ever report their instances, so they are silent
  // from now on, and their instances are failed after unresponsive_after like a silent
  // sled's, so that they can be started elsewhere. Expunge retires such a sled for good.
  std::vector<model::Sled> unserved;
  if (auto known = db::SledList(ds_); known) {
    for (const model::Sled& s : *known) {
      if (!s.expunged && !sled_agents_.sleds.contains(s.id)) unserved.push_back(s);
    }
  }
  if (!unserved.empty()) {
    std::vector<std::string> serials;
    for (const model::Sled& s : unserved) serials.push_back(s.serial);
    LogEvent("warn",
             "sleds that no configured sled agent serves; their instances are failed after "
             "--sled-unresponsive-after",
             {{"sleds", serials}, {"unresponsive_after_ms", options_.unresponsive_after.count()}});
    threads_.emplace_back([this, unserved] {
      NameThisThread("sled-unserved");
      WatchUnservedSleds(unserved);
    });
  }
  {
    MutexLock lock(mu_);
    for (const auto& [sled_id, sled] : sled_agents_.sleds) {
      status_.push_back(SledWatchStatus{.sled_id = sled_id, .address = sled->address()});
    }
  }
  size_t index = 0;
  for (const auto& [sled_id, sled] : sled_agents_.sleds) {
    threads_.emplace_back([this, index, id = sled_id, client = sled] {
      NameThisThread("sled-watch");
      WatchLoop(index, id, *client);
    });
    ++index;
  }
  threads_.emplace_back([this] {
    NameThisThread("sled-compare");
    MutexLock lock(mu_);
    while (!stop_) {
      lock.Wait(cv_, [&]() FP_REQUIRES(mu_) { return stop_ || now_; });
      if (stop_) break;
      now_ = false;
      lock.Unlock();
      if (!lease_ || lease_->Held()) {
        const std::optional<db::LeaseFence> look = LookFence();
        ReapOrphans(look ? &*look : nullptr);
      }
      lock.Lock();
    }
  });
}

std::vector<SledWatchStatus> SledWatcher::SledStatuses() const {
  MutexLock lock(mu_);
  return status_;
}

void SledWatcher::Wake() {
  {
    MutexLock lock(mu_);
    now_ = true;
  }
  cv_.notify_all();
}

void SledWatcher::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  // A report call waits up to report_wait for a change: end it now.
  if (!threads_.empty()) {
    for (const auto& [sled_id, sled] : sled_agents_.sleds) sled->AbandonReports();
  }
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

}  // namespace fp::loops
