#pragma once

// Brings every switch agent's NAT table to the datastore's desired state.
//
// The datastore's nat_entry table is a versioned log (versions assigned in commit order);
// each switch keeps the generation of the last change it installed. Sync() sends each switch
// the changes after its generation, in order; a switch never advances past a change it failed
// to install, so nothing is skipped. Changes are sent only to the run of the switch agent they
// were meant for (its boot id): a switch agent that restarted applies none of them, and is
// reloaded whole instead.
//
// A heartbeat per switch (every `heartbeat_ms`, GET /nat/status: its run, generation and table
// digest) notices a switch agent that restarted, or lost its generation, within one period and
// reloads its table whole (PUT /nat). At the datastore's version it compares the switch's
// digest with the desired table's (DesiredNat, kept up to date from the change feed; a switch
// that agrees with the last read is not worth another for kHeartbeatsPerRead periods), so drift
// (an entry lost, added or changed behind the control plane's back) costs a whole-table
// comparison (Repair) only when the digests differ. A switch ahead of the datastore (a database
// restored to an earlier version, or a crash that undid commits already sent: Sync sends
// commits as soon as they are visible, before they are durable) is repaired the same way.
//
// Several switches: every one holds every entry. Sync returns once every reachable switch
// acknowledged; a switch that does not answer (or timed out, below) does not fail it as long
// as another switch acknowledged, and is brought up to date by its heartbeat when it answers
// again. A switch that answers but refuses a change fails Sync. Switches may be added and
// removed while the reconciler runs.
//
// A hung switch is called once, not once per caller: after an exchange that timed out (the
// switch did not answer within the agent timeout), its Sync and Repair fail at once with that
// error for as long again as the exchange took. So a caller that waited for the lock behind
// the timed-out exchange, or the best-effort sync of an undo right after, does not wait out
// another timeout; an operation against a hung switch answers within about one agent timeout.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agents/agents.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/mutex.h"
#include "common/time.h"
#include "db/datastore.h"
#include "db/leases.h"
#include "db/nat.h"

namespace fp::loops {

agents::NatEntry ToEntry(const model::NatEntry& row);

// The desired NAT table's digest (agents::NatEntryHash) at the datastore's version, followed
// through the change feed: each call reads only the changes since the last. Thread-safe.
class DesiredNat {
 public:
  explicit DesiredNat(db::Datastore& ds) : ds_(ds) {}
  struct Point {
    int64_t version = 0;
    uint64_t digest = 0;
    int64_t entries = 0;
  };
  // Brings the digest to the datastore's current version (the whole table the first time).
  Result<Point> Current();
  // The last Current()'s point, if it can stand for the datastore's version without a read: it
  // was read less than `max_age` ago, and no sync of this server has begun since the read did
  // (NoteSync; this server follows each change it makes with a sync, so only another server's
  // changes can be missing from it). nullopt otherwise.
  std::optional<Point> Recent(MonoDuration max_age);
  // Called as each sync of this server begins, after the commits it carries: a point read
  // before it may lack them.
  void NoteSync() { syncs_.fetch_add(1); }
  // Sets it from a whole table read at `version` (its entries' count and the sum of their
  // agents::NatEntryHash), unless it is newer already.
  void Rebase(int64_t version, int64_t entries, uint64_t digest);
  // The version of the last Current().
  int64_t last_version() const { return last_version_.load(); }
  // The entries of the last Current() or Rebase (what a whole table's size is expected to be).
  int64_t last_entries() const { return last_entries_.load(); }

  // The syncs' reads of the change feed, numbered in the order they begin (taken just before
  // the read's transaction; a read shared by several switches takes one number). A read
  // numbered above what feed_reads_begun() said when a caller came began after the caller's
  // commits, so it holds them (SwitchReconciler's group sync).
  int64_t BeginFeedRead() { return feed_reads_.fetch_add(1) + 1; }
  // A read-modify-write, not a load: a read that takes a later number then synchronises with
  // it, so what the caller did before (its commits) happens before that read begins.
  int64_t feed_reads_begun() { return feed_reads_.fetch_add(0); }

 private:
  db::Datastore& ds_;
  std::atomic<int64_t> feed_reads_{0};
  std::atomic<int64_t> last_version_{0};  // written under mu_, read without it
  std::atomic<int64_t> last_entries_{0};  // likewise
  Mutex mu_;
  std::optional<Point> at_ FP_GUARDED_BY(mu_);
  // The syncs begun (NoteSync); when the last Current() began, and syncs_ then: what Recent()
  // judges by.
  std::atomic<int64_t> syncs_{0};
  std::optional<MonoTime> read_began_ FP_GUARDED_BY(mu_);
  int64_t syncs_at_read_ FP_GUARDED_BY(mu_) = 0;

  // Follows `at_` through the feed to the datastore's version: the point there, or nullopt
  // when the datastore's version is below `at_`'s (it went back).
  Result<std::optional<Point>> FollowFeed() FP_REQUIRES(mu_);
};

// A read of the NAT feed after version `after`, and its number (DesiredNat::BeginFeedRead): one
// made for every switch of a Sync, or inside the transaction that made the changes it carries
// (NatReconciler::ReadFeedAtCommitIn).
struct FeedRead {
  int64_t after = 0;
  db::NatFeed feed;
  int64_t read = 0;
};

// What the reconciler knows about one switch (for /metrics).
struct SwitchNatStatus {
  std::string address;
  bool reachable = false;             // its last exchange answered
  int64_t applied_generation = 0;     // its generation at that exchange
  Timestamp last_full_reconcile = 0;  // when its table was last found (or made) whole; 0: never
  int64_t repaired_missing = 0;       // entries a repair or reload installed that it lacked
  int64_t repaired_extra = 0;         // entries it held that the datastore does not want
  int64_t repaired_wrong = 0;         // entries it held with another target
  int64_t reloads = 0;                // whole-table reloads after its agent restarted empty
  int64_t restarts_seen = 0;          // times its agent's run (boot id) changed
  int64_t waiting_syncs = 0;          // callers waiting now for an exchange in flight with it
};

class SwitchReconciler;

class NatReconciler {
 public:
  // With no switch (AddSwitch adds them), or with one not owned (it must outlive this).
  explicit NatReconciler(db::Datastore& ds);
  NatReconciler(db::Datastore& ds, agents::SwitchAgentClient& switch_agent);
  ~NatReconciler();
  NatReconciler(const NatReconciler&) = delete;
  NatReconciler& operator=(const NatReconciler&) = delete;

  // Adds a switch (its heartbeat starts at once if the background runs); no effect if one
  // with the same address is there. Removes the switch at `address`: false if none.
  void AddSwitch(std::shared_ptr<agents::SwitchAgentClient> client);
  bool RemoveSwitch(const std::string& address);
  std::vector<std::string> SwitchAddresses() const;

  // Sends every switch every change it lacks. Returns once every reachable switch
  // acknowledged all changes committed before the call. ServiceUnavailable naming the switch
  // agent if one refuses a change or installs only part of it, or if none answers (or each
  // timed out within the hold-off above); also if there is no switch. Thread-safe (calls are
  // serialized per switch). `context`: whom the pushes are made for (sent to the switches).
  Status Sync(const agents::CallContext& context);
  Status Sync() { return Sync(agents::CallContext{}); }
  // In the body of a write that changed NAT rows, after those changes: reads the change feed
  // from where the answering switches are, in that transaction (db::NatChangesAtCommitIn; on
  // PostgreSQL right after its commit, in the same exchange), and once it committed keeps that
  // read under `key` for the Sync that pushes the changes (SyncWith), which then reads nothing
  // itself. Nothing when no switch answered yet. At most
  // kKeptFeeds are kept (the oldest goes first: a saga that failed or a server that died before its
  // Sync), each of at most kKeptChanges changes.
  Status ReadFeedAtCommitIn(db::Tx& tx, const Uuid& key);
  static constexpr size_t kKeptFeeds = 64;
  static constexpr size_t kKeptChanges = 64;
  // Sync, from the read kept under `key` when there is one (and it suits the switches: one
  // behind where it starts reads its own), which it then forgets. It promises less than Sync:
  // the switches get every change that read holds, i.e. those of the transaction that made it
  // (and of every one committed before, when it took a NAT version), not a change the caller
  // committed after it.
  Status SyncWith(const agents::CallContext& context, const Uuid& key);
  // What became of the reads ReadFeedAtCommitIn made, since the reconciler was made: used by
  // a SyncWith; dropped unused (the oldest past kKeptFeeds, or one cut at kKeptChanges); and
  // the SyncWith calls that found none kept under their key and read the feed themselves (a
  // read dropped, or never made: a saga resumed after a restart, or no switch had answered
  // yet). Drops under load say that more sagas are between their first step and their push
  // than kKeptFeeds.
  struct KeptReadCounts {
    int64_t used = 0;
    int64_t dropped = 0;
    int64_t missed = 0;
  };
  KeptReadCounts KeptReads() const;
  // Full comparison on every switch; replaces a switch's table if it differs. Returns true if
  // it repaired any. Errors: the first switch's that failed.
  Result<bool> Repair();
  // Deletes removed rows no live switch needs any more: removed below the datastore's version
  // and every answering switch's generation, more than kGarbageRetention before `now` (§5.6).
  // A switch that does not answer is left out (if it returns behind the rows deleted, its
  // digest differs and it is repaired); with no switch answering, nothing is deleted and the
  // error is the first switch's. Returns how many rows it deleted. Needs no lock against Sync.
  Result<int64_t> CollectGarbage(Timestamp now);
  static constexpr Timestamp kGarbageRetention = int64_t{14} * 24 * 3600 * 1000 * 1000;  // 2 weeks
  static constexpr std::chrono::seconds kGarbagePeriod{30};

  // Runs each switch's heartbeat every `heartbeat_ms` on a thread of its own, and
  // CollectGarbage every kGarbagePeriod, until StopBackground(). With `lease` (several servers
  // on one database), reloads, repairs and garbage collection run only while this server
  // holds it; the heartbeat's Sync runs on every server (the switch skips the changes it has).
  // StopBackground releases the lease. `lease` must outlive the reconciler.
  void StartBackground(int heartbeat_ms, db::TaskLeaseKeeper* lease = nullptr);
  void StopBackground();
  // A heartbeat whose switch agrees with the desired table read less than this many periods
  // ago, with no sync of this server since, judges it on that read (SwitchReconciler::Check):
  // an idle server reads the datastore about once every this many periods, for all its
  // switches together. A change of another server's that its own push did not bring to a
  // switch reaches it within about that many periods.
  static constexpr int kHeartbeatsPerRead = 10;

  // The datastore's NAT version as last read, and each switch's status.
  int64_t desired_version() const { return desired_.last_version(); }
  std::vector<SwitchNatStatus> SwitchStatuses() const;

  static agents::NatEntry ToEntry(const model::NatEntry& row) { return loops::ToEntry(row); }

 private:
  struct Member;
  std::vector<std::shared_ptr<Member>> Members() const;
  Status SyncFrom(const agents::CallContext& context, std::optional<FeedRead> prefetched);
  // Where a read of the feed for every switch starts: the lowest generation the answering
  // switches acknowledged; none if none answers.
  std::optional<int64_t> FeedStart() const;
  void StartHeartbeat(Member& m) FP_REQUIRES(mu_);
  void RunHeartbeat(Member& m);

  db::Datastore& ds_;
  DesiredNat desired_;
  mutable Mutex mu_;
  std::vector<std::shared_ptr<Member>> members_ FP_GUARDED_BY(mu_);
  // ReadFeedAtCommitIn's reads, oldest first.
  mutable Mutex kept_mu_;
  std::deque<std::pair<Uuid, FeedRead>> kept_ FP_GUARDED_BY(kept_mu_);
  KeptReadCounts kept_counts_ FP_GUARDED_BY(kept_mu_);
  bool background_ FP_GUARDED_BY(mu_) = false;
  int heartbeat_ms_ FP_GUARDED_BY(mu_) = 100;
  db::TaskLeaseKeeper* lease_ = nullptr;  // set before the background starts
  std::condition_variable bg_cv_;
  bool bg_stop_ FP_GUARDED_BY(mu_) = false;
  std::thread gc_;
};

}  // namespace fp::loops
