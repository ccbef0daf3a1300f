#include "nat/nat_reconciler.h"

#include <fmt/format.h>

#include <algorithm>
#include <future>
#include <map>

#include "common/log.h"
#include "http/client.h"

namespace fp::nat {

namespace {
constexpr int64_t kBatch = 500;
constexpr int64_t kDigestBatch = 5000;

bool EntryLess(const agents::NatEntry& a, const agents::NatEntry& b) {
  return std::tie(a.external_ip, a.first_port) < std::tie(b.external_ip, b.first_port);
}

std::vector<agents::NatEntry> ToEntries(const std::vector<model::NatEntry>& rows) {
  std::vector<agents::NatEntry> out;
  out.reserve(rows.size());
  for (const auto& row : rows) out.push_back(ToEntry(row));
  return out;
}
}  // namespace

agents::NatEntry ToEntry(const model::NatEntry& row) {
  return agents::NatEntry{row.external_ip,  row.first_port, row.last_port,
                          row.sled_address, row.vni,        row.mac};
}

// ---- DesiredNat ----

Result<DesiredNat::Point> DesiredNat::Current() {
  std::lock_guard lock(mu_);
  if (!at_) {
    db::NatSnapshot snapshot = FP_TRY(db::NatReadSnapshot(ds_));
    Point p{.version = snapshot.version};
    for (const auto& row : snapshot.rows) p.digest += agents::NatEntryHash(ToEntry(row));
    p.entries = static_cast<int64_t>(snapshot.rows.size());
    at_ = p;
  }
  for (;;) {
    db::NatFeed feed = FP_TRY(db::NatChangesSince(ds_, at_->version, kDigestBatch));
    for (const auto& c : feed.changes) {
      // The feed lists a row's addition only while the row is live: a row added and removed
      // after our position shows only its removal, and was never counted.
      bool counted = !c.deleted || c.row.version_added <= at_->version;
      if (counted) {
        uint64_t h = agents::NatEntryHash(ToEntry(c.row));
        at_->digest += c.deleted ? -h : h;
        at_->entries += c.deleted ? -1 : 1;
      }
      at_->version = c.version;
    }
    if (feed.changes.empty() || at_->version >= feed.current_version) {
      at_->version = std::max(at_->version, feed.current_version);
      last_version_.store(at_->version);
      return *at_;
    }
  }
}

void DesiredNat::Rebase(int64_t version, const std::vector<agents::NatEntry>& entries) {
  std::lock_guard lock(mu_);
  if (at_ && at_->version > version) return;
  Point p{.version = version, .entries = static_cast<int64_t>(entries.size())};
  for (const auto& e : entries) p.digest += agents::NatEntryHash(e);
  at_ = p;
}

// ---- SwitchReconciler: one switch ----

class SwitchReconciler {
 public:
  SwitchReconciler(db::Datastore& ds, DesiredNat& desired,
                   std::shared_ptr<agents::SwitchAgentClient> client)
      : ds_(ds), desired_(desired), client_(std::move(client)) {
    status_.address = client_->address();
  }

  // Sync; `unreachable` tells a switch that did not answer from one that refused.
  Status Sync(bool& unreachable) {
    std::lock_guard lock(sync_mu_);
    refused_ = false;
    Status s = UnlessHung<void>([&] { return SyncLocked(); });
    // Not answering (refused connections, timeouts, 5xx): the switch catches up later. An
    // answer that refuses a change, a conflicting table, or anything else fails Sync.
    unreachable = !s && !refused_ && s.error().kind() == ErrorKind::kServiceUnavailable;
    return s;
  }

  Result<bool> Repair() {
    std::lock_guard lock(sync_mu_);
    return UnlessHung<bool>([&] { return RepairLocked(); });
  }

  // The heartbeat: where the switch is, and what it needs. `lead`: this server reloads and
  // repairs (with several servers, the lease holder).
  Status Check(bool lead) {
    std::lock_guard lock(sync_mu_);
    return UnlessHung<void>([&]() -> Status {
      agents::NatStatus at = FP_TRY(Ask());
      DesiredNat::Point desired = FP_TRY(desired_.Current());
      const bool restarted = known_boot_ && *known_boot_ != at.boot_id;
      if (restarted) {
        std::lock_guard s(status_mu_);
        ++status_.restarts_seen;
      }
      known_boot_ = at.boot_id;
      known_generation_ = at.generation;
      if (at.generation == 0 && desired.version > 0) {
        // Restarted empty, or new: the table is reloaded whole rather than rebuilt from the
        // feed change by change. With several servers the lease holder does it (meanwhile a
        // Sync here rebuilds it from the feed, which is as correct and slower).
        if (!lead) return Ok();
        return Reload(at, restarted);
      }
      if (at.generation < desired.version) {
        FP_CHECK_OK(SyncLocked());
        // Brought to the datastore's version: compared at the next heartbeat.
        if (!known_generation_ || *known_generation_ >= desired.version) return Ok();
        // Still below: the feed has nothing after the switch's generation (its last changes
        // were removals already collected), so its table is to be the desired one as it is.
        at = FP_TRY(Ask());
        at.generation = std::max(at.generation, desired.version);
      }
      if (at.generation == desired.version && at.digest == desired.digest) {
        std::lock_guard s(status_mu_);
        status_.last_full_reconcile = ds_.clock().Now();
        return Ok();
      }
      // Drift at the same generation, or a switch ahead of the datastore.
      if (!lead) return Ok();
      return RepairLocked().map([](bool) {});
    });
  }

  // The switch's generation now (for garbage collection).
  Result<int64_t> Generation() {
    agents::NatStatus at = FP_TRY(client_->GetStatus());
    return at.generation;
  }

  SwitchNatStatus Snapshot() const {
    std::lock_guard lock(status_mu_);
    return status_;
  }

  agents::SwitchAgentClient& client() { return *client_; }

 private:
  // Asks the switch where it is; records whether it answered.
  Result<agents::NatStatus> Ask() {
    auto at = client_->GetStatus();
    Answered(at ? std::optional<int64_t>(at->generation) : std::nullopt,
             at ? nullptr : &at.error());
    return at;
  }

  // Records an exchange: the generation the switch reported, or the error it failed with.
  void Answered(std::optional<int64_t> generation, const Error* error) {
    std::lock_guard lock(status_mu_);
    bool was = status_.reachable;
    status_.reachable = generation.has_value();
    if (generation) status_.applied_generation = *generation;
    if (was && error) {
      LogEvent("warn", "switch agent does not answer; its table is brought up to date when it does",
               {{"switch_agent", client_->address()}, {"error", error->message()}});
    } else if (!was && generation && ever_answered_) {
      LogEvent("info", "switch agent answers again", {{"switch_agent", client_->address()}});
    }
    if (generation) ever_answered_ = true;
  }

  template <typename T, typename Exchange>
  Result<T> UnlessHung(Exchange exchange) {
    auto began = std::chrono::steady_clock::now();
    if (hung_ && began < hung_->until) return Fail(hung_->error);
    Result<T> result = exchange();
    if (!result && http::IsTimeout(result.error())) {
      auto ended = std::chrono::steady_clock::now();
      hung_ = Hung{ended + (ended - began), result.error()};
    } else {
      hung_.reset();
    }
    if (!result && !refused_) {
      // Its position is unknown until it is asked again.
      known_generation_.reset();
    }
    return result;
  }

  Status SyncLocked() {
    if (!known_generation_ || !known_boot_) {
      // Ask the switch where it is (after a start, or after an error: it may have restarted).
      int64_t desired = FP_TRY(db::NatCurrentVersion(ds_));
      agents::NatStatus at = FP_TRY(Ask());
      if (at.generation > desired) {
        // Ahead of the datastore (e.g. a restored database): resend everything.
        known_boot_ = at.boot_id;
        return RepairLocked().map([](bool) {});
      }
      known_boot_ = at.boot_id;
      known_generation_ = at.generation;
    }
    int64_t at = *known_generation_;
    // The current version and the first batch after the switch's position, in one read.
    db::NatFeed feed = FP_TRY(db::NatChangesSince(ds_, at, kBatch));
    const int64_t desired = feed.current_version;
    if (at >= desired) return Ok();  // nothing new
    // Any failure below leaves the switch's position unknown until it is asked again.
    known_generation_.reset();
    while (at < desired) {
      if (feed.changes.empty()) break;
      std::vector<agents::NatChange> batch;
      for (const auto& c : feed.changes) batch.push_back({ToEntry(c.row), c.version, c.deleted});
      auto applied = client_->ApplyChangesOn(*known_boot_, batch);
      Answered(applied ? std::optional<int64_t>(applied->generation) : std::nullopt,
               applied ? nullptr : &applied.error());
      if (!applied) return Fail(applied.error());
      if (applied->boot_mismatch) {
        // Another run of the agent than the one last asked: it restarted (its table lacks what
        // came before these changes: reload it whole), or a repair lowered its generation
        // (go on from where it is).
        known_boot_.reset();
        agents::NatStatus now = FP_TRY(Ask());
        if (now.generation == 0 && desired > 0) {
          {
            std::lock_guard s(status_mu_);
            ++status_.restarts_seen;
          }
          return Reload(now, true);
        }
        return SyncLocked();
      }
      if (applied->generation < batch.back().gen) {
        refused_ = true;
        return Fail(Error::Unavailable(
            fmt::format("switch agent at {} stopped at NAT generation {} of {}; retry later",
                        client_->address(), applied->generation, batch.back().gen)));
      }
      at = applied->generation;
      if (at < desired) feed = FP_TRY(db::NatChangesSince(ds_, at, kBatch));
    }
    known_generation_ = at;
    return Ok();
  }

  // Replaces the table of a switch found at `at` (empty, or restarted) with the desired one.
  Status Reload(const agents::NatStatus& at, bool restarted) {
    auto began = std::chrono::steady_clock::now();
    db::NatSnapshot snapshot = FP_TRY(db::NatReadSnapshot(ds_));
    std::vector<agents::NatEntry> desired = ToEntries(snapshot.rows);
    desired_.Rebase(snapshot.version, desired);
    const int64_t entries = static_cast<int64_t>(desired.size());
    auto replaced = FP_TRY(client_->ReplaceAllIf(
        agents::NatTable{snapshot.version, std::move(desired)}, at.generation));
    if (!replaced) {
      known_boot_.reset();
      known_generation_.reset();
      refused_ = true;
      return Fail(Error::Unavailable(fmt::format(
          "switch agent at {}: its NAT table changed during the reload; the next heartbeat "
          "looks again",
          client_->address())));
    }
    // Asked again before the next change (a lowered generation starts a new run).
    known_boot_.reset();
    known_generation_.reset();
    Answered(*replaced, nullptr);
    {
      std::lock_guard s(status_mu_);
      ++status_.reloads;
      status_.repaired_missing += entries - at.entries;
      status_.last_full_reconcile = ds_.clock().Now();
    }
    auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began);
    LogEvent("info",
             restarted ? "switch agent restarted; its NAT table reloaded"
                       : "NAT table loaded into an empty switch agent",
             {{"switch_agent", client_->address()},
              {"entries", entries},
              {"generation", *replaced},
              {"duration_ms", ms.count()}});
    return Ok();
  }

  Result<bool> RepairLocked() {
    // The switch first, then the datastore: every change the switch holds was committed before
    // it was sent, so the datastore read after it holds it too (other servers' Syncs included).
    agents::NatStatus before = FP_TRY(Ask());
    agents::NatTable installed = FP_TRY(client_->GetNat());
    db::NatSnapshot snapshot = FP_TRY(db::NatReadSnapshot(ds_));
    const int64_t version = snapshot.version;
    std::vector<agents::NatEntry> desired = ToEntries(snapshot.rows);
    std::sort(desired.begin(), desired.end(), EntryLess);
    desired_.Rebase(version, desired);
    std::sort(installed.entries.begin(), installed.entries.end(), EntryLess);
    if (installed.entries == desired && installed.generation >= version) {
      known_boot_ = before.boot_id;
      known_generation_ = installed.generation;
      std::lock_guard s(status_mu_);
      status_.last_full_reconcile = ds_.clock().Now();
      return false;
    }
    // What differs, by key.
    int64_t missing = 0, extra = 0, wrong = 0;
    {
      auto i = installed.entries.begin();
      auto d = desired.begin();
      while (i != installed.entries.end() || d != desired.end()) {
        if (d == desired.end() || (i != installed.entries.end() && EntryLess(*i, *d))) {
          ++extra;
          ++i;
        } else if (i == installed.entries.end() || EntryLess(*d, *i)) {
          ++missing;
          ++d;
        } else {
          if (!(*i == *d)) ++wrong;
          ++i;
          ++d;
        }
      }
    }
    known_generation_.reset();
    // Only over the table just compared: another server's Sync may have sent a newer change
    // since, which this replacement would take away; the next pass compares again.
    const size_t desired_entries = desired.size();
    // Labelled with the datastore's version even when the switch was ahead (a crash undid
    // commits already sent): the agent then starts a new run (boot id), so every server's
    // next change is refused until it asks where the switch is, and none is skipped as
    // already installed.
    auto replaced = FP_TRY(
        client_->ReplaceAllIf(agents::NatTable{version, std::move(desired)}, installed.generation));
    if (!replaced) {
      refused_ = true;
      return Fail(Error::Unavailable(fmt::format(
          "switch agent at {}: its NAT table changed during the repair; the next pass compares "
          "again",
          client_->address())));
    }
    // Asked again before the next change: a lowered generation started a new run.
    known_boot_.reset();
    known_generation_.reset();
    Answered(*replaced, nullptr);
    {
      std::lock_guard s(status_mu_);
      status_.repaired_missing += missing;
      status_.repaired_extra += extra;
      status_.repaired_wrong += wrong;
      status_.last_full_reconcile = ds_.clock().Now();
    }
    LogEvent("warn", "NAT drift repaired",
             {{"switch_agent", client_->address()},
              {"installed_entries", installed.entries.size()},
              {"desired_entries", desired_entries},
              {"missing", missing},
              {"extra", extra},
              {"wrong", wrong},
              {"generation", version}});
    return true;
  }

  struct Hung {
    std::chrono::steady_clock::time_point until;
    Error error;
  };

  db::Datastore& ds_;
  DesiredNat& desired_;
  const std::shared_ptr<agents::SwitchAgentClient> client_;
  std::mutex sync_mu_;
  // The last exchange's timeout and the end of its hold-off; reset by any exchange that ends
  // otherwise (guarded by sync_mu_).
  std::optional<Hung> hung_;
  // The switch's run and generation as of our last successful exchange (guarded by sync_mu_);
  // the generation is unknown after any error, so the next Sync asks the switch first.
  std::optional<std::string> known_boot_;
  std::optional<int64_t> known_generation_;
  bool refused_ = false;  // the last Sync's failure was the switch refusing (guarded by sync_mu_)
  mutable std::mutex status_mu_;
  SwitchNatStatus status_;      // guarded by status_mu_
  bool ever_answered_ = false;  // guarded by status_mu_
};

// ---- NatReconciler: every switch ----

struct NatReconciler::Member {
  std::shared_ptr<SwitchReconciler> reconciler;
  std::thread heartbeat;
  std::once_flag joined;  // RemoveSwitch and StopBackground may both join it
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;  // guarded by mu
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
  std::lock_guard lock(mu_);
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
    std::lock_guard lock(mu_);
    auto it = std::find_if(members_.begin(), members_.end(), [&](const auto& m) {
      return m->reconciler->client().address() == address;
    });
    if (it == members_.end()) return false;
    removed = *it;
    members_.erase(it);
  }
  {
    std::lock_guard lock(removed->mu);
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
  std::lock_guard lock(mu_);
  return members_;
}

Status NatReconciler::Sync() {
  auto members = Members();
  if (members.empty()) {
    return Fail(Error::Unavailable("no switch agent is configured; NAT changes wait for one"));
  }
  std::vector<char> unreachable(members.size(), 0);  // not vector<bool>: set concurrently
  std::vector<Status> results(members.size(), Ok());
  {
    // The switches at once, so that one slow switch costs its own time, not the sum.
    std::vector<std::future<void>> others;
    for (size_t i = 1; i < members.size(); ++i) {
      others.push_back(std::async(std::launch::async, [&, i] {
        bool u = false;
        results[i] = members[i]->reconciler->Sync(u);
        unreachable[i] = u;
      }));
    }
    bool u = false;
    results[0] = members[0]->reconciler->Sync(u);
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
  std::unique_lock lock(m.mu);
  while (!m.stop) {
    lock.unlock();
    // With several servers, reloads and repairs compare whole tables: one server does them.
    const bool lead = !lease_ || lease_->Held();
    (void)m.reconciler->Check(lead);  // failures are logged as the switch's state changes
    lock.lock();
    int period;
    {
      std::lock_guard l(mu_);
      period = heartbeat_ms_;
    }
    m.cv.wait_for(lock, std::chrono::milliseconds(period), [&] { return m.stop; });
  }
}

void NatReconciler::StartHeartbeat(Member& m) {
  m.heartbeat = std::thread([this, &m] { RunHeartbeat(m); });
}

void NatReconciler::StartBackground(int heartbeat_ms, db::TaskLeaseKeeper* lease) {
  lease_ = lease;
  {
    std::lock_guard lock(mu_);
    heartbeat_ms_ = heartbeat_ms;
    background_ = true;
    for (const auto& m : members_) StartHeartbeat(*m);
  }
  gc_ = std::thread([this] {
    std::unique_lock lock(mu_);
    while (!bg_stop_) {
      bg_cv_.wait_for(lock, kGarbagePeriod, [&] { return bg_stop_; });
      if (bg_stop_) break;
      lock.unlock();
      if (!lease_ || lease_->Held()) {
        if (auto g = CollectGarbage(ds_.clock().Now()); !g) {
          LogEvent("warn", "NAT garbage collection failed", {{"error", g.error().message()}});
        } else if (*g > 0) {
          LogEvent("info", "NAT garbage collected", {{"removed_rows", *g}});
        }
      }
      lock.lock();
    }
  });
}

void NatReconciler::StopBackground() {
  std::vector<std::shared_ptr<Member>> members;
  {
    std::lock_guard lock(mu_);
    if (!background_) return;
    background_ = false;
    bg_stop_ = true;
    members = members_;
  }
  bg_cv_.notify_all();
  for (const auto& m : members) {
    {
      std::lock_guard lock(m->mu);
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

}  // namespace fp::nat
