#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <typeinfo>
#include <vector>

#include "common/error.h"
#include "common/ip.h"
#include "common/name.h"
#include "common/time.h"
#include "db/sqlite.h"
#include "model/page.h"
#include "saga/store.h"

namespace fp::db {

// The datastore stores and returns the product's model under the model's own names.
using namespace ::fp::model;  // NOLINT(google-build-using-namespace)

// A transaction in progress. Obtained only inside Datastore::Write/Read. It is the saga
// engine's StoreTx of the datastore's saga store (db/saga_log.h), so that a saga action's
// database change commits with the saga's log.
class Tx : public saga::StoreTx {
 public:
  Tx(SqliteConnection& conn, Timestamp now) : conn_(conn), now_(now) {}

  // The transaction's timestamp: every row it writes carries the same time.
  Timestamp now() const { return now_; }

  template <typename... Args>
  Result<std::vector<Row>> Query(std::string_view sql, Args&&... args) {
    return conn_.Query(sql, {ToSql(std::forward<Args>(args))...});
  }
  template <typename... Args>
  Result<std::optional<Row>> QueryRow(std::string_view sql, Args&&... args) {
    auto rows = FP_TRY(Query(sql, std::forward<Args>(args)...));
    if (rows.empty()) return std::optional<Row>();
    return std::optional<Row>(std::move(rows.front()));
  }
  // Same with a parameter list built at run time.
  Result<std::vector<Row>> QueryV(std::string_view sql, const std::vector<SqlValue>& params) {
    return conn_.Query(sql, params);
  }
  // Runs a statement; returns the number of rows it changed.
  template <typename... Args>
  Result<int64_t> Exec(std::string_view sql, Args&&... args) {
    FP_TRY(Query(sql, std::forward<Args>(args)...));
    return conn_.Changes();
  }

  static SqlValue ToSql(const Uuid& u) { return u.ToString(); }
  static SqlValue ToSql(const std::optional<Uuid>& u) {
    return u ? SqlValue(u->ToString()) : SqlValue(nullptr);
  }
  static SqlValue ToSql(const std::string& s) { return s; }
  static SqlValue ToSql(std::string_view s) { return std::string(s); }
  static SqlValue ToSql(const char* s) { return std::string(s); }
  static SqlValue ToSql(const std::optional<std::string>& s) {
    return s ? SqlValue(*s) : SqlValue(nullptr);
  }
  static SqlValue ToSql(const IpAddr& a) { return Blob{a.Key()}; }
  static SqlValue ToSql(const Blob& b) { return b; }
  static SqlValue ToSql(const SqlValue& v) { return v; }
  static SqlValue ToSql(bool b) { return int64_t{b ? 1 : 0}; }
  static SqlValue ToSql(int v) { return int64_t{v}; }
  static SqlValue ToSql(int64_t v) { return v; }
  static SqlValue ToSql(std::nullptr_t) { return nullptr; }

 private:
  SqliteConnection& conn_;
  Timestamp now_;
};

// The SQL tail ("AND <key> > ? ORDER BY <key> LIMIT ?") of one page of a list sorted by
// name or id, with its parameters appended to `params`.
std::string PageClause(const PageRequest& page, std::string_view name_column,
                       std::string_view id_column, std::vector<SqlValue>& params);

// Parses a stored UUID/address column; a malformed value is an internal error (corruption).
Result<Uuid> UuidColumn(const Row& row, size_t i);
Result<std::optional<Uuid>> OptUuidColumn(const Row& row, size_t i);
Result<IpAddr> IpColumn(const Row& row, size_t i);

// The persistent state of floatplane: the transaction engine. All methods are thread-safe.
//
// The resources are reached through free functions over it, one header per resource (silos.h,
// projects.h, ip_pools.h, external_ips.h, tokens.h, instances.h, ...): a function taking the
// Datastore runs exactly one transaction, in which a check and the change it guards happen
// together and errors are derived from what that transaction read; a function named `...In`
// runs inside a caller's transaction, so that steps compose.
//
// Error conventions: NotFound when a referenced resource is absent or soft-deleted (worded as
// the API words it), ObjectAlreadyExists for name conflicts, InvalidRequest for rule
// violations, InsufficientCapacity when a pool is exhausted, Internal for database failures.
class Datastore {
 public:
  // Opens (creating and migrating as needed) the SQLite database at `path`.
  static Result<std::unique_ptr<Datastore>> OpenSqlite(const std::string& path,
                                                       std::shared_ptr<const Clock> clock);
  ~Datastore();

  // Runs `fn` in a write transaction (BEGIN IMMEDIATE), retrying the whole function on
  // SQLITE_BUSY with jittered backoff until a deadline. `fn` returning an error rolls back.
  //
  // Inside a keyed request (db/idempotency.h), the write also records the request's answer,
  // rendered from its result, or the link to a saga it creates, in the same transaction.
  template <typename T>
  Result<T> Write(const std::function<Result<T>(Tx&)>& fn) {
    Result<T> out = Fail(Error::Internal("transaction did not run"));
    FP_CHECK_OK(RunScopedWrite(
        [&](Tx& tx) -> Status {
          out = fn(tx);
          if (!out) return Fail(out.error());
          return Ok();
        },
        [&]() -> const void* { return &*out; }, typeid(T)));
    return out;
  }
  // Same for a body that returns only a Status (a keyed request records it as such).
  Status Write(const std::function<Status(Tx&)>& fn) {
    return RunScopedWrite(fn, nullptr, typeid(void));
  }
  // Same for a read-only transaction (a consistent snapshot; runs concurrently with writes).
  // Returns once every commit it could have seen is durable.
  template <typename T>
  Result<T> Read(const std::function<Result<T>(Tx&)>& fn) {
    return ReadImpl<T>(fn, /*wait_durable=*/true);
  }
  // A read that may return commits not yet durable, without waiting for the sync. Only for
  // readers whose consumer tolerates a crash undoing what they saw: the NAT feed (a switch
  // ahead of the datastore is repaired by the reconciler's checks), which must not wait
  // for syncs while it holds the lock that orders the switch's updates.
  template <typename T>
  Result<T> ReadLatest(const std::function<Result<T>(Tx&)>& fn) {
    return ReadImpl<T>(fn, /*wait_durable=*/false);
  }

  // Within its scope, reads on this thread through `ds` return without waiting for the sync of
  // the commits they could have seen; the scope's end waits for them instead. For a request
  // whose checks read, then run a saga: its writes wait for a later commit anyway, so on success
  // the end finds everything durable already, and only an answer derived from the checks alone
  // (an error, or an "already done") waits, as every read's answer does. An inner scope waits
  // at its own end.
  class DeferredDurability {
   public:
    explicit DeferredDurability(Datastore& ds);
    ~DeferredDurability();
    DeferredDurability(const DeferredDurability&) = delete;
    DeferredDurability& operator=(const DeferredDurability&) = delete;

   private:
    friend class Datastore;
    Datastore& ds_;
    int64_t seen_ = 0;  // the highest commit number a read in the scope could have seen
    DeferredDurability* outer_;
  };

  // Durable commits (write transactions that committed) since open.
  int64_t durable_commits() const { return durable_commits_.load(); }
  // SQLite transactions that carried them: concurrent write transactions run one after the
  // other inside one SQLite transaction (each in a savepoint), so this grows more slowly.
  int64_t sqlite_commits() const { return sqlite_commits_.load(); }
  // Syncs of the write-ahead log since open. Under concurrent writes one sync makes several
  // commits durable, so this grows more slowly than durable_commits().
  int64_t log_syncs() const { return log_syncs_.load(); }
  // Checkpoints (the log copied into the database file) run by the background checkpointer.
  int64_t checkpoints() const { return checkpoints_.load(); }
  // Times the log was emptied so that the next write starts it over from its beginning.
  int64_t log_restarts() const { return log_restarts_.load(); }
  // Of those, the times the log had reached kLogLimitFrames and writes waited for the restart.
  int64_t log_limit_restarts() const { return log_limit_restarts_.load(); }
  // The write-ahead log is checkpointed in the background every kCheckpointFrames frames (a
  // frame is a page of 4 KiB and a 24-byte header) and starts over after each checkpoint. Should
  // it reach kLogLimitFrames all the same, the write lane checkpoints it before the next batch,
  // so it never holds more than kLogLimitFrames plus one batch's pages unless a read lasts
  // longer than a second (see LimitLog; after such a failure the lane tries again after a
  // backoff of 2 s, doubling up to 30 s).
  static constexpr int kCheckpointFrames = 4000;
  static constexpr int kLogLimitFrames = 2 * kCheckpointFrames;
  // Sizes in bytes of the database file and of its write-ahead log (0 if a file is absent).
  int64_t database_file_bytes() const;
  int64_t log_file_bytes() const;
  // Read connections open now (idle or in use); at most kMaxReaders but for reads in reads.
  int open_readers() {
    std::lock_guard lock(pool_mu_);
    return open_readers_;
  }

  // Test seam: `hook` is called with the name of each sync point the datastore passes (e.g.
  // "ip_range_remove:checked"), inside the transaction, so a test can force an interleaving.
  void TEST_SetSyncPoint(std::function<void(std::string_view)> hook);
  void SyncPoint(std::string_view name);

  static constexpr int kMaxReaders = 64;  // see pool_mu_

  const Clock& clock() const { return *clock_; }

 private:
  Datastore(std::string path, std::shared_ptr<const Clock> clock);
  Status RunTransaction(bool write, const std::function<Status(Tx&)>& body,
                        bool wait_durable = true);
  template <typename T>
  Result<T> ReadImpl(const std::function<Result<T>(Tx&)>& fn, bool wait_durable) {
    Result<T> out = Fail(Error::Internal("transaction did not run"));
    FP_CHECK_OK(RunTransaction(
        false,
        [&](Tx& tx) -> Status {
          out = fn(tx);
          if (!out) return Fail(out.error());
          return Ok();
        },
        wait_durable));
    return out;
  }
  // A write through the idempotency scope of the calling thread's keyed request, if any (see
  // Write): `result` gives the body's result, of type `type` (nullptr and void: a Status).
  Status RunScopedWrite(const std::function<Status(Tx&)>& body,
                        const std::function<const void*()>& result, const std::type_info& type);
  struct QueuedWrite;
  Status RunWrite(const std::function<Status(Tx&)>& body);
  void RunWriteBatch(const std::vector<QueuedWrite*>& batch);
  Result<std::unique_ptr<SqliteConnection>> Acquire();
  void Release(std::unique_ptr<SqliteConnection> conn);
  // Returns once every commit numbered up to `seq` is on disk, syncing the log if no sync that
  // covers it is already running (the leader syncs for everyone waiting: group commit).
  Status WaitDurable(int64_t seq);
  Status SyncLog();  // fdatasync of the WAL file; requires durable_mu_ not held

  std::string path_;
  std::shared_ptr<const Clock> clock_;
  // Read connections: at most kMaxReaders open (each holds descriptors for the database, its
  // log and the shared-memory index); a read finding all of them busy waits for one. A thread
  // that already holds one (a read inside a read) is never made to wait, so it cannot deadlock.
  std::mutex pool_mu_;
  std::condition_variable pool_cv_;                      // a connection came back
  std::vector<std::unique_ptr<SqliteConnection>> idle_;  // guarded by pool_mu_
  int open_readers_ = 0;                                 // guarded by pool_mu_
  // Writes queue; a writer finding nobody writing leads a batch: it takes every queued write
  // (its own first) and runs them in order, each in a savepoint of one SQLite transaction, then
  // commits once, hands the lead to the first write queued meanwhile, waits until its batch is
  // durable and wakes the batch's writers. Pages the writes share (indexes, counters, the saga
  // tables) are written to the log once per batch instead of once per write. One batch at a time
  // within this process; SQLite's lock covers other processes. Writes always use writer_: a
  // connection's page cache is dropped whenever another connection wrote, so one writing connection
  // keeps it warm.
  std::mutex queue_mu_;
  std::vector<QueuedWrite*> queue_;           // guarded by queue_mu_
  bool writing_ = false;                      // a batch is running; guarded by queue_mu_
  std::unique_ptr<SqliteConnection> writer_;  // used only by the thread running a batch
  std::atomic<int64_t> sqlite_commits_{0};
  std::atomic<int64_t> durable_commits_{0};
  // Group commit. A write transaction takes a number before its COMMIT (commit_begun_) and
  // publishes it after (commit_done_); durable_ is the highest number known to be on disk.
  // Every transaction, reads included, waits until what it may have seen is durable before
  // its result leaves the datastore: no caller acts on a commit a crash could still undo.
  std::atomic<int64_t> commit_begun_{0};
  std::mutex durable_mu_;
  std::condition_variable durable_cv_;    // a sync ended
  std::condition_variable commit_cv_;     // a commit was published (for commit_waiters_)
  int commit_waiters_ = 0;                // guarded by durable_mu_
  std::atomic<int64_t> durable_seen_{0};  // durable_, readable without the lock
  int64_t commit_done_ = 0;               // guarded by durable_mu_
  int64_t durable_ = 0;                   // guarded by durable_mu_
  bool syncing_ = false;                  // guarded by durable_mu_
  int wal_fd_ = -1;  // opened by the first sync; used only by the syncing leader
  std::atomic<int64_t> log_syncs_{0};
  // Checkpoints run on a thread of their own with a connection of their own, once the log
  // holds kCheckpointFrames frames since the last one: no commit waits while the log is copied
  // into the database and both files are synced (SQLite's automatic checkpoint runs inside the
  // commit that crossed its threshold, holding up every write queued behind it). The rarer
  // they run, the fewer times a page written over and over is copied.
  //
  // A background checkpoint alone never lets the log start over while writes keep coming:
  // SQLite starts it over only at a write that finds it entirely copied, and writes append to
  // it while the checkpoint runs. The log then grew without bound (about 900 MiB in 20 s of
  // benchmark), and every commit wrote into newly allocated blocks. So after each one the
  // write lane, between two batches, copies the remainder (RestartLog, a RESTART checkpoint
  // with a short wait for readers), and the next write starts the log over.
  //
  // The log then holds kCheckpointFrames plus what is written while a checkpoint runs: 16.7 MiB
  // in the attach benchmark, but 44 MB with 800 KiB commits back to back on a busy machine
  // (checkpoint_test.cc). At kLogLimitFrames the lane copies it all itself (LimitLog), writes
  // waiting, which bounds it.
  void CheckpointLoop();
  void RestartLog();  // write lane only
  void LimitLog();    // write lane only: the log reached kLogLimitFrames
  // A line on stderr (the datastore has no logger of its own); the log keeps growing until the
  // next checkpoint succeeds, and nothing written is lost.
  void WarnCheckpointFailed(const Error& error) const;
  std::atomic<bool> restart_wanted_{false};  // set by the checkpointer, cleared by the lane
  int restart_attempts_ = 0;                 // write lane only
  // After LimitLog failed (a read longer than its budget pins the log), the next attempt waits
  // this long, doubling up to 30 s: otherwise every batch would wait the whole budget for as
  // long as the read lasts. Write lane only.
  std::chrono::steady_clock::time_point limit_retry_at_{};
  std::chrono::milliseconds limit_backoff_{2000};
  std::atomic<int64_t> log_restarts_{0};
  std::atomic<int64_t> log_limit_restarts_{0};
  int log_frames_ = 0;     // write lane only: frames in the log after the last commit
  std::mutex copying_mu_;  // held by the checkpointer while it copies, and by LimitLog
  std::unique_ptr<SqliteConnection> checkpoint_conn_;  // used only by checkpointer_
  std::mutex checkpoint_mu_;
  std::condition_variable checkpoint_cv_;
  bool checkpoint_wanted_ = false;  // guarded by checkpoint_mu_
  bool checkpoint_stop_ = false;    // guarded by checkpoint_mu_
  int frames_at_request_ = 0;       // writer thread only: the log's size when last requested
  std::atomic<int64_t> checkpoints_{0};
  std::thread checkpointer_;
  std::atomic<bool> sync_hook_set_{false};
  std::mutex sync_mu_;
  std::function<void(std::string_view)> sync_hook_;
};

}  // namespace fp::db
