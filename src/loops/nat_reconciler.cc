#include "loops/nat_reconciler.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>

#include "common/log.h"
#include "common/thread_name.h"
#include "loops/switch_reconciler.h"

namespace fp::loops {

namespace detail {

// Runs a switch's Syncs for callers that sync another switch themselves meanwhile, one at a
// time (as the switch's own lock would), on a thread started at the first and kept: a thread
// per call cost more than the call (its start, its first allocations, its thread-locals).
class SyncThread {
 public:
  SyncThread() = default;
  SyncThread(const SyncThread&) = delete;
  SyncThread& operator=(const SyncThread&) = delete;
  // Runs what is queued, then ends the thread.
  ~SyncThread() {
    {
      MutexLock lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  std::future<void> Run(std::function<void()> job) {
    std::packaged_task<void()> task(std::move(job));
    std::future<void> done = task.get_future();
    {
      MutexLock lock(mu_);
      // Started before the job is queued: a thread that cannot start leaves no job behind.
      if (!thread_.joinable()) {
        thread_ = std::thread([this] {
          NameThisThread("nat-sync");
          Loop();
        });
      }
      jobs_.push_back(std::move(task));
    }
    cv_.notify_one();
    return done;
  }

 private:
  void Loop() {
    MutexLock lock(mu_);
    for (;;) {
      lock.Wait(cv_, [&]() FP_REQUIRES(mu_) { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, nothing left
      std::packaged_task<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.Unlock();
      job();
      lock.Lock();
    }
  }

  Mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<void()>> jobs_ FP_GUARDED_BY(mu_);
  bool stop_ FP_GUARDED_BY(mu_) = false;
  // Started by the first Run (Runs may race); the destructor joins it, when no Run is left.
  std::thread thread_ FP_GUARDED_BY(mu_);
};

}  // namespace detail

// ---- NatReconciler: every switch ----

struct NatReconciler::Member {
  std::shared_ptr<SwitchReconciler> reconciler;
  std::thread heartbeat;
  std::once_flag joined;  // RemoveSwitch and StopBackground may both join it
  Mutex mu;
  std::condition_variable cv;
  bool stop FP_GUARDED_BY(mu) = false;
  detail::SyncThread sync;  // the Syncs of callers that sync the first switch themselves
};

NatReconciler::NatReconciler(db::Datastore& ds) : ds_(ds), desired_(ds) {}

NatReconciler::NatReconciler(db::Datastore& ds, agents::SwitchAgentClient& switch_agent)
    : NatReconciler(ds) {
  // Not owned: a no-op deleter.
  AddSwitch(
      std::shared_ptr<agents::SwitchAgentClient>(&switch_agent, [](agents::SwitchAgentClient*) {}));
}

NatReconciler::~NatReconciler() { StopBackground(); }

void NatReconciler::AddSwitch(std::shared_ptr<agents::SwitchAgentClient> client) {
  MutexLock lock(mu_);
  for (const auto& m : members_) {
    if (m->reconciler->client().address() == client->address()) return;
  }
  auto m = std::make_shared<Member>();
  m->reconciler = std::make_shared<SwitchReconciler>(ds_, desired_, std::move(client));
  members_.push_back(m);
  if (background_) StartHeartbeat(*m);
}

bool NatReconciler::RemoveSwitch(const std::string& address) {
  std::shared_ptr<Member> removed;
  {
    MutexLock lock(mu_);
    auto it = std::find_if(members_.begin(), members_.end(), [&](const auto& m) {
      return m->reconciler->client().address() == address;
    });
    if (it == members_.end()) return false;
    removed = *it;
    members_.erase(it);
  }
  {
    MutexLock lock(removed->mu);
    removed->stop = true;
  }
  removed->cv.notify_all();
  std::call_once(removed->joined, [&] {
    if (removed->heartbeat.joinable()) removed->heartbeat.join();
  });
  return true;
}

std::vector<std::string> NatReconciler::SwitchAddresses() const {
  std::vector<std::string> out;
  for (const auto& m : Members()) out.push_back(m->reconciler->client().address());
  return out;
}

std::vector<std::shared_ptr<NatReconciler::Member>> NatReconciler::Members() const {
  MutexLock lock(mu_);
  return members_;
}

std::optional<int64_t> NatReconciler::FeedStart() const {
  std::optional<int64_t> after;
  for (const auto& m : Members()) {
    auto at = m->reconciler->answered_generation();
    if (at) after = std::min(after.value_or(*at), *at);
  }
  return after;
}

Status NatReconciler::ReadFeedAtCommitIn(db::Tx& tx, const Uuid& key) {
  const std::optional<int64_t> after = FeedStart();
  if (!after) return Ok();
  // Numbered now, inside the transaction and before its changes are committed: a caller that
  // came before this (its commits made) had them committed before this transaction, which
  // SQLite runs alone, so this read holds them (db::NatChangesAtCommitIn); on PostgreSQL the
  // read's snapshot is taken after this transaction's commit, later still.
  const int64_t number = desired_.BeginFeedRead();
  return db::NatChangesAtCommitIn(
      tx, *after, static_cast<int64_t>(kKeptChanges), [this, key, after, number](db::NatFeed feed) {
        MutexLock lock(kept_mu_);
        // Cut at its limit: the Sync reads the rest itself (a switch takes a shared read only
        // when it was not cut).
        if (feed.changes.size() >= kKeptChanges) {
          ++kept_counts_.dropped;
          return;
        }
        if (kept_.size() >= kKeptFeeds) {
          kept_.pop_front();
          ++kept_counts_.dropped;
        }
        kept_.emplace_back(key, FeedRead{*after, std::move(feed), number});
      });
}

Status NatReconciler::SyncWith(const agents::CallContext& context, const Uuid& key) {
  std::optional<FeedRead> kept;
  {
    MutexLock lock(kept_mu_);
    for (auto it = kept_.begin(); it != kept_.end(); ++it) {
      if (it->first == key) {
        kept = std::move(it->second);
        kept_.erase(it);
        break;
      }
    }
    if (kept) {
      ++kept_counts_.used;
    } else {
      ++kept_counts_.missed;
    }
  }
  return SyncFrom(context, std::move(kept));
}

NatReconciler::KeptReadCounts NatReconciler::KeptReads() const {
  MutexLock lock(kept_mu_);
  return kept_counts_;
}

Status NatReconciler::Sync(const agents::CallContext& context) {
  return SyncFrom(context, std::nullopt);
}

Status NatReconciler::SyncFrom(const agents::CallContext& context,
                               std::optional<FeedRead> prefetched) {
  // After the caller's commits: a heartbeat no longer takes a desired table read before them
  // for the datastore's (DesiredNat::Recent).
  desired_.NoteSync();
  // Taken first, after the caller's commits: each switch's sync then counts only a read of the
  // feed begun after this as one that carried them (its own sync may start later, queued).
  const int64_t came = desired_.feed_reads_begun();
  auto members = Members();
  if (members.empty()) {
    return Fail(Error::Unavailable("no switch agent is configured; NAT changes wait for one"));
  }
  std::vector<char> unreachable(members.size(), 0);  // not vector<bool>: set concurrently
  std::vector<Status> results(members.size(), Ok());
  // With several switches, one read of the feed serves them all (each read its own before:
  // a read per switch per change), from the lowest position the answering ones acknowledged
  // (one that does not answer would make it start far back, and fails fast anyway).
  // Read when the first switch that needs it asks (after its wait for the exchange in flight):
  // when every switch was brought to this caller's changes meanwhile, nothing is read. A read
  // made in the caller's own transaction (ReadFeedAtCommitIn) serves instead, one switch or
  // several.
  SwitchReconciler::SharedFeedOnce shared_once([&]() -> std::optional<FeedRead> {
    if (prefetched) return std::move(prefetched);
    std::optional<int64_t> after = FeedStart();
    if (!after) return std::nullopt;
    const int64_t number = desired_.BeginFeedRead();
    auto read = db::NatChangesSince(ds_, *after, SwitchReconciler::kBatch);
    if (!read) return std::nullopt;
    return FeedRead{*after, std::move(*read), number};
  });
  SwitchReconciler::SharedFeedOnce* feed =
      members.size() > 1 || prefetched ? &shared_once : nullptr;
  {
    // The switches at once, so that one slow switch costs its own time, not the sum.
    std::vector<std::future<void>> others;
    // The jobs use this frame: it is left only once each has ended, however it is left (a
    // packaged_task's future, unlike std::async's, does not wait when destroyed).
    struct WaitAll {
      std::vector<std::future<void>>& futures;
      ~WaitAll() {
        for (auto& f : futures) {
          if (f.valid()) f.wait();
        }
      }
    } wait_all{others};
    for (size_t i = 1; i < members.size(); ++i) {
      others.push_back(members[i]->sync.Run([&, i] {
        bool u = false;
        results[i] = members[i]->reconciler->Sync(u, context, feed, came);
        unreachable[i] = u;
      }));
    }
    bool u = false;
    results[0] = members[0]->reconciler->Sync(u, context, feed, came);
    unreachable[0] = u;
    for (auto& f : others) f.get();
  }
  std::optional<Error> first_down;
  bool acknowledged = false;
  for (size_t i = 0; i < members.size(); ++i) {
    if (results[i]) {
      acknowledged = true;
    } else if (!unreachable[i]) {
      return results[i];  // it answered and refused
    } else if (!first_down) {
      first_down = results[i].error();
    }
  }
  if (!acknowledged) return Fail(*first_down);
  return Ok();
}

Result<bool> NatReconciler::Repair() {
  bool repaired = false;
  std::optional<Error> first;
  for (const auto& m : Members()) {
    auto r = m->reconciler->Repair();
    if (!r && !first) first = r.error();
    if (r && *r) repaired = true;
  }
  if (first) return Fail(*first);
  return repaired;
}

Result<int64_t> NatReconciler::CollectGarbage(Timestamp now) {
  int64_t below = FP_TRY(db::NatCurrentVersion(ds_));
  std::optional<Error> first;
  bool answered = false;
  for (const auto& m : Members()) {
    auto generation = m->reconciler->Generation();
    if (!generation) {
      if (!first) first = generation.error();
      continue;
    }
    answered = true;
    below = std::min(below, *generation);
  }
  if (!answered) {
    if (first) return Fail(*first);
    return int64_t{0};  // no switch: nothing is known to have installed anything
  }
  return db::NatCollectGarbage(ds_, below, now - kGarbageRetention);
}

std::vector<SwitchNatStatus> NatReconciler::SwitchStatuses() const {
  std::vector<SwitchNatStatus> out;
  for (const auto& m : Members()) out.push_back(m->reconciler->Snapshot());
  return out;
}

void NatReconciler::RunHeartbeat(Member& m) {
  const Clock& clock = ds_.clock();
  MutexLock lock(m.mu);
  while (!m.stop) {
    lock.Unlock();
    // With several servers, reloads and repairs compare whole tables: one server does them.
    const bool lead = !lease_ || lease_->Held();
    int period;
    {
      MutexLock l(mu_);
      period = heartbeat_ms_;
    }
    // The next heartbeat is due a period after this one began, not after it ended: whoever
    // sees this check's result and then moves the clock a period on finds the next one due
    // (taken after the check, the deadline was a period past that move when a slow thread
    // took it late). So a heartbeat comes every period, one call to its switch at a time: a
    // switch answering in just under a period is asked again at once (its threads never run
    // two checks together); a check that outlasts its period rests a whole period after it.
    auto due = clock.Deadline(std::chrono::milliseconds(period));
    // A switch that agrees with the desired table as read within kHeartbeatsPerRead periods
    // is not worth a read of the datastore (failures are logged as the switch's state changes).
    (void)m.reconciler->Check(lead, std::chrono::milliseconds(period) * kHeartbeatsPerRead);
    if (clock.Monotonic() > due) due = clock.Deadline(std::chrono::milliseconds(period));
    lock.Lock();
    clock.WaitUntil(lock, m.cv, due, [&]() FP_REQUIRES(m.mu) { return m.stop; });
  }
}

void NatReconciler::StartHeartbeat(Member& m) {
  m.heartbeat = std::thread([this, &m] {
    NameThisThread("nat-heartbeat");
    RunHeartbeat(m);
  });
}

void NatReconciler::StartBackground(int heartbeat_ms, db::TaskLeaseKeeper* lease) {
  lease_ = lease;
  {
    MutexLock lock(mu_);
    heartbeat_ms_ = heartbeat_ms;
    background_ = true;
    for (const auto& m : members_) StartHeartbeat(*m);
  }
  gc_ = std::thread([this] {
    NameThisThread("nat-collect");
    MutexLock lock(mu_);
    while (!bg_stop_) {
      ds_.clock().WaitFor(lock, bg_cv_, kGarbagePeriod,
                          [&]() FP_REQUIRES(mu_) { return bg_stop_; });
      if (bg_stop_) break;
      lock.Unlock();
      if (!lease_ || lease_->Held()) {
        if (auto g = CollectGarbage(ds_.clock().Now()); !g) {
          LogEvent("warn", "NAT garbage collection failed", {{"error", g.error().message()}});
        } else if (*g > 0) {
          LogEvent("info", "NAT garbage collected", {{"removed_rows", *g}});
        }
      }
      lock.Lock();
    }
  });
}

void NatReconciler::StopBackground() {
  std::vector<std::shared_ptr<Member>> members;
  {
    MutexLock lock(mu_);
    if (!background_) return;
    background_ = false;
    bg_stop_ = true;
    members = members_;
  }
  bg_cv_.notify_all();
  for (const auto& m : members) {
    {
      MutexLock lock(m->mu);
      m->stop = true;
    }
    m->cv.notify_all();
    std::call_once(m->joined, [&] {
      if (m->heartbeat.joinable()) m->heartbeat.join();
    });
  }
  if (gc_.joinable()) gc_.join();
  if (lease_) lease_->Release();
}

}  // namespace fp::loops
