#include "loops/switch_reconciler.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "common/log.h"
#include "db/nat.h"
#include "http/client.h"

namespace fp::loops {

uint32_t NatBucketCount(int64_t entries) {
  return static_cast<uint32_t>(
      std::clamp<int64_t>(entries / 24, 1, static_cast<int64_t>(agents::kMaxNatBuckets)));
}

size_t BatchLength(const std::vector<db::NatFeedChange>& changes, int64_t limit) {
  const size_t n = changes.size();
  if (n > 1 && static_cast<int64_t>(n) >= limit && changes.back().deleted) return n - 1;
  return n;
}

SwitchReconciler::SwitchReconciler(db::Datastore& ds, DesiredNat& desired,
                                   std::shared_ptr<agents::SwitchAgentClient> client)
    : ds_(ds), desired_(desired), client_(std::move(client)) {
  status_.address = client_->address();
}

const SwitchReconciler::SharedFeed* SwitchReconciler::SharedFeedOnce::Get() {
  std::call_once(once_, [this] { feed_ = read_(); });
  return feed_ ? &*feed_ : nullptr;
}

Status SwitchReconciler::Sync(bool& unreachable, const agents::CallContext& context,
                              SharedFeedOnce* shared, std::optional<int64_t> came) {
  // After this caller's commits (it calls once they are made): a read numbered above it holds
  // them.
  if (!came) came = desired_.feed_reads_begun();
  waiting_syncs_.fetch_add(1);
  MutexLock lock(sync_mu_);
  waiting_syncs_.fetch_sub(1);
  unreachable = false;
  if (covered_ > *came) return Ok();  // an exchange since this caller came carried its changes
  refused_ = false;
  Status s = UnlessHung<void>([&]() FP_REQUIRES(sync_mu_) { return SyncLocked(context, shared); });
  // Not answering (refused connections, timeouts, 5xx): the switch catches up later. An
  // answer that refuses a change, a conflicting table, or anything else fails Sync.
  unreachable = !s && !refused_ && s.error().kind() == ErrorKind::kServiceUnavailable;
  return s;
}

std::optional<int64_t> SwitchReconciler::answered_generation() const {
  MutexLock lock(status_mu_);
  if (!status_.reachable) return std::nullopt;
  return status_.applied_generation;
}

Result<bool> SwitchReconciler::Repair() {
  MutexLock lock(sync_mu_);
  return UnlessHung<bool>([&]() FP_REQUIRES(sync_mu_) { return RepairLocked(); });
}

Status SwitchReconciler::Check(bool lead, MonoDuration reuse_for) {
  MutexLock lock(sync_mu_);
  return UnlessHung<void>([&]() FP_REQUIRES(sync_mu_) -> Status {
    bool restarted = false;
    agents::NatStatus at = FP_TRY(Ask(&restarted));
    std::optional<DesiredNat::Point> recent = desired_.Recent(reuse_for);
    const bool agrees = recent && at.generation == recent->version && at.digest == recent->digest;
    DesiredNat::Point desired = agrees ? *recent : FP_TRY(desired_.Current());
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
      MutexLock s(status_mu_);
      status_.last_full_reconcile = ds_.clock().Now();
      return Ok();
    }
    // Drift at the same generation, or a switch ahead of the datastore.
    if (!lead) return Ok();
    return RepairLocked().map([](bool) {});
  });
}

Result<int64_t> SwitchReconciler::Generation() {
  agents::NatStatus at = FP_TRY(client_->GetStatus());
  return at.generation;
}

SwitchNatStatus SwitchReconciler::Snapshot() const {
  SwitchNatStatus s;
  {
    MutexLock lock(status_mu_);
    s = status_;
  }
  s.waiting_syncs = waiting_syncs_.load();
  return s;
}

Result<agents::NatStatus> SwitchReconciler::Ask(bool* restarted) {
  auto at = client_->GetStatus();
  Answered(at ? std::optional<int64_t>(at->generation) : std::nullopt, at ? nullptr : &at.error());
  if (at) {
    const bool another_run = last_boot_seen_ && *last_boot_seen_ != at->boot_id;
    if (another_run) {
      MutexLock s(status_mu_);
      ++status_.restarts_seen;
    }
    last_boot_seen_ = at->boot_id;
    if (restarted) *restarted = another_run;
  }
  return at;
}

void SwitchReconciler::Answered(std::optional<int64_t> generation, const Error* error) {
  MutexLock lock(status_mu_);
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
Result<T> SwitchReconciler::UnlessHung(Exchange exchange) {
  auto began = ds_.clock().Monotonic();
  if (hung_ && began < hung_->until) return Fail(hung_->error);
  Result<T> result = exchange();
  if (!result && http::IsTimeout(result.error())) {
    auto ended = ds_.clock().Monotonic();
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

Status SwitchReconciler::SyncLocked(const agents::CallContext& context,
                                    SharedFeedOnce* shared_once) {
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
  // The current version and the first batch after the switch's position, in one read: the
  // shared one when it starts at or before that position and was not cut at kBatch (it then
  // holds every change up to its current version).
  db::NatFeed feed;
  int64_t read = 0;  // its number: what the switch is brought to covers the callers before it
  const SharedFeed* shared = shared_once ? shared_once->Get() : nullptr;
  if (shared && shared->after <= at && static_cast<int64_t>(shared->feed.changes.size()) < kBatch) {
    feed.current_version = shared->feed.current_version;
    for (const db::NatFeedChange& c : shared->feed.changes) {
      if (c.version > at) feed.changes.push_back(c);
    }
    read = shared->read;
  } else {
    read = desired_.BeginFeedRead();
    feed = FP_TRY(db::NatChangesSince(ds_, at, kBatch));
  }
  const int64_t desired = feed.current_version;
  if (at >= desired) {  // nothing new
    covered_ = std::max(covered_, read);
    return Ok();
  }
  // Any failure below leaves the switch's position unknown until it is asked again.
  known_generation_.reset();
  while (at < desired) {
    if (feed.changes.empty()) break;
    std::vector<agents::NatChange> batch;
    const size_t length = BatchLength(feed.changes, kBatch);
    for (size_t i = 0; i < length; ++i) {
      const db::NatFeedChange& c = feed.changes[i];
      batch.push_back({ToEntry(c.row), c.version, c.deleted});
    }
    auto applied = client_->ApplyChangesOn(*known_boot_, batch, context);
    Answered(applied ? std::optional<int64_t>(applied->generation) : std::nullopt,
             applied ? nullptr : &applied.error());
    if (!applied) return Fail(applied.error());
    if (applied->boot_mismatch) {
      // Another run of the agent than the one last asked: it restarted (its table lacks what
      // came before these changes: reload it whole), or a repair lowered its generation
      // (go on from where it is).
      known_boot_.reset();
      agents::NatStatus now = FP_TRY(Ask());  // counts the restart
      if (now.generation == 0 && desired > 0) return Reload(now, true);
      return SyncLocked(context);  // its own read from where it is
    }
    if (applied->generation < batch.back().gen) {
      refused_ = true;
      // The switch says why when it knows (a full table, a dataplane that refused).
      std::string why = applied->message.empty() ? "" : fmt::format(" ({})", applied->message);
      return Fail(Error::Unavailable(
          fmt::format("switch agent at {} stopped at NAT generation {} of {}{}; retry later",
                      client_->address(), applied->generation, batch.back().gen, why)));
    }
    at = applied->generation;
    if (at < desired) feed = FP_TRY(db::NatChangesSince(ds_, at, kBatch));
  }
  known_generation_ = at;
  if (at >= desired) covered_ = std::max(covered_, read);
  return Ok();
}

Status SwitchReconciler::Reload(const agents::NatStatus& at, bool restarted) {
  auto began = ds_.clock().Monotonic();
  // The table is written into the request as it is read: at rack scale (100,000 entries) a
  // reload then holds the request's text only, not the rows and entries besides.
  const int64_t expected = desired_.last_entries() + desired_.last_entries() / 16;
  agents::NatReplaceWriter request(expected);
  uint64_t digest = 0;
  const int64_t version = FP_TRY(db::NatReadSnapshotEach(
      ds_,
      [&] {  // a read run again writes the request again
        request = agents::NatReplaceWriter(expected);
        digest = 0;
      },
      [&](model::NatEntry&& row) -> Status {
        agents::NatEntry e = ToEntry(row);
        digest += agents::NatEntryHash(e);
        request.Add(e);
        return Ok();
      }));
  const int64_t entries = request.entries();
  desired_.Rebase(version, entries, digest);
  auto replaced =
      FP_TRY(client_->ReplaceAllIfWritten(std::move(request).Finish(version, at.generation)));
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
    MutexLock s(status_mu_);
    ++status_.reloads;
    status_.repaired_missing += entries - at.entries;
    status_.last_full_reconcile = ds_.clock().Now();
  }
  auto ms = std::chrono::duration<double, std::milli>(ds_.clock().Monotonic() - began);
  LogEvent("info",
           restarted ? "switch agent restarted; its NAT table reloaded"
                     : "NAT table loaded into an empty switch agent",
           {{"switch_agent", client_->address()},
            {"entries", entries},
            {"generation", *replaced},
            {"duration_ms", ms.count()}});
  return Ok();
}

Result<bool> SwitchReconciler::RepairLocked() {
  // The switch first, then the datastore: every change the switch holds was committed before
  // it was sent, so the datastore read after it holds it too (other servers' Syncs included).
  agents::NatStatus before = FP_TRY(Ask());
  const uint32_t count = NatBucketCount(std::max(before.entries, desired_.last_entries()));
  agents::NatBuckets installed = FP_TRY(client_->GetNatBuckets(count));
  if (installed.digests.size() != count) {
    return Fail(Error::Internal(fmt::format("switch agent at {} answered {} NAT buckets for {}",
                                            client_->address(), installed.digests.size(), count)));
  }
  // The datastore's table at one version, read twice: its buckets' digests first, and once
  // they are compared with the switch's, the entries of the buckets that differ, written into
  // the request as they are read. The whole table is never held: at 100,000 entries it would
  // be some 25 MiB as entries and 13 MiB as text, for a drift that is often one entry.
  std::vector<uint64_t> digests;
  std::vector<int64_t> counts;
  uint64_t digest = 0;
  int64_t entries = 0;
  std::vector<uint32_t> differ;
  std::vector<bool> wanted;
  int64_t sending = 0;
  agents::NatReplaceWriter request;
  const int64_t version = FP_TRY(db::NatReadSnapshotTwice(
      ds_,
      [&] {  // a read run again reads everything again
        digests.assign(count, 0);
        counts.assign(count, 0);
        digest = 0;
        entries = 0;
      },
      [&](model::NatEntry&& row) -> Status {
        agents::NatEntry e = ToEntry(row);
        const uint64_t h = agents::NatEntryHash(e);
        const uint32_t b = agents::NatEntryBucket(e, count);
        digests[b] += h;
        ++counts[b];
        digest += h;
        ++entries;
        return Ok();
      },
      [&](int64_t) -> Result<bool> {
        differ.clear();
        wanted.assign(count, false);
        sending = 0;
        for (uint32_t b = 0; b < count; ++b) {
          if (digests[b] == installed.digests[b] && counts[b] == installed.entries[b]) continue;
          differ.push_back(b);
          wanted[b] = true;
          sending += counts[b];
        }
        request = agents::NatReplaceWriter(sending);
        return !differ.empty();
      },
      [&](model::NatEntry&& row) -> Status {
        agents::NatEntry e = ToEntry(row);
        if (wanted[agents::NatEntryBucket(e, count)]) request.Add(e);
        return Ok();
      }));
  desired_.Rebase(version, entries, digest);
  if (differ.empty() && installed.generation >= version) {
    known_boot_ = installed.boot_id;
    known_generation_ = installed.generation;
    MutexLock s(status_mu_);
    status_.last_full_reconcile = ds_.clock().Now();
    return false;
  }
  known_generation_.reset();
  // Only over the table just compared (its run, generation and digest): another server's Sync
  // may have sent a newer change since, or another server's repair changed buckets this one
  // judged equal, at the same generation; the next pass compares again. Labelled with the
  // datastore's version even when the switch was ahead (a crash undid commits already sent):
  // the agent then starts a new run (boot id), so every server's next change is refused until
  // it asks where the switch is, and none is skipped as already installed.
  agents::NatBucketsRepaired repaired = FP_TRY(client_->RepairBucketsWritten(
      std::move(request).FinishBuckets(count, differ, version, installed)));
  if (!repaired.replaced) {
    refused_ = true;
    return Fail(Error::Unavailable(fmt::format(
        "switch agent at {}: its NAT table changed during the repair; the next pass compares "
        "again",
        client_->address())));
  }
  // Asked again before the next change: a lowered generation started a new run, which is
  // this server's doing, not a restart to count.
  known_boot_.reset();
  known_generation_.reset();
  if (version < installed.generation) last_boot_seen_.reset();
  Answered(repaired.generation, nullptr);
  {
    MutexLock s(status_mu_);
    status_.repaired_missing += repaired.added;
    status_.repaired_extra += repaired.removed;
    status_.repaired_wrong += repaired.changed;
    status_.last_full_reconcile = ds_.clock().Now();
  }
  LogEvent("warn", "NAT drift repaired",
           {{"switch_agent", client_->address()},
            {"desired_entries", entries},
            {"buckets_sent", differ.size()},
            {"buckets", count},
            {"entries_sent", sending},
            {"missing", repaired.added},
            {"extra", repaired.removed},
            {"wrong", repaired.changed},
            {"generation", version}});
  return true;
}

}  // namespace fp::loops
