#pragma once

// A database engine as the datastore uses it: write transactions, read transactions, and when
// what they saw is durable. The Datastore (db/datastore.h) puts the SQL, the idempotency
// records and the clock on top; an engine knows nothing of them. SQLite's engine is
// db/sqlite/engine.h (write lane with group commit, checkpointer, reader pool); PostgreSQL's is
// db/postgres/engine.h (a connection pool, SERIALIZABLE transactions retried whole).
//
// Commit numbers. An engine numbers the commits it makes, 1, 2, ..., and can say which it has
// made durable: a caller that acts on what a read saw (or on a write's result) must wait until
// every commit the read could have seen is durable, or a crash could undo what it acted on.
// An engine whose COMMIT is durable when it returns (PostgreSQL's) reports 0 and never waits.

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string_view>

#include "common/error.h"
#include "common/mutex.h"
#include "db/connection.h"

namespace fp::db {

// Counters since the engine opened, for metrics and tests. Zero where an engine has no such
// thing.
struct EngineStats {
  int64_t durable_commits = 0;     // write transactions that committed and are durable
  int64_t engine_commits = 0;      // the engine's own transactions carrying them (batches)
  int64_t log_syncs = 0;           // syncs of the write-ahead log
  int64_t checkpoints = 0;         // background checkpoints of the log
  int64_t log_restarts = 0;        // times the log was emptied to start over
  int64_t log_limit_restarts = 0;  // of those, made with writes waiting (the log at its limit)
  int open_readers = 0;            // read connections open now
  int waiting_readers = 0;         // transactions waiting now for a connection (SQLite: reads only)
  int sync_waiters = 0;     // transactions waiting now for a log sync another one leads (SQLite)
  int queued_writes = 0;    // writes waiting now to lead a batch, or in one for its sync (SQLite)
  int64_t round_trips = 0;  // exchanges with a database server (none for SQLite)
  int64_t retries = 0;      // transactions run again after a conflict or a lost connection
  // Write transaction runs that waited their turn in the write queue (PostgreSQL: those that
  // ask for it, Tx::JoinWriteQueue, and every later run of a write after a serialization
  // failure, a deadlock or a timeout; none on SQLite, which has one writer).
  int64_t queued_transactions = 0;
  // Engine transactions by the writes they carried: 1, 2, 3-4, 5-8, ..., 65-128, more
  // (SQLite's group commit; PostgreSQL runs each write alone: all in the first).
  static constexpr int kBatchBuckets = 9;
  std::array<int64_t, kBatchBuckets> batch_sizes{};
  int64_t batched_writes = 0;  // the writes those transactions carried
};

class Engine {
 public:
  virtual ~Engine() = default;

  // Runs `body` in a write transaction and returns once it is committed and durable, or rolled
  // back. `body` returning an error rolls back its writes only and returns that error; the
  // engine may run `body` on another caller's thread, together with other writes in one
  // transaction of its own (each write in a savepoint), so `body` must not rely on thread
  // identity beyond what its caller hands over. An engine may run `body` again when its
  // transaction conflicts with another process and is retried whole, so `body` keeps nothing
  // from a failed run; the SQLite engine retries only the start of a transaction (a busy
  // database, with jittered backoff up to a deadline: Internal after it) and runs `body` once;
  // the PostgreSQL engine runs it again after a serialization failure, a deadlock or a lost
  // connection (Unavailable once its deadline passes). An exception escaping `body` is turned
  // into Internal. Thread-safe.
  virtual Status Write(const std::function<Status(Connection&)>& body) = 0;
  // Runs `body` in a read-only transaction (a consistent snapshot, concurrent with writes),
  // retried like a write on a conflict, and returns `body`'s result. Unless no connection could
  // be had, sets `seen` to the commit number up to which the snapshot could have seen commits,
  // whether `body` succeeded or not (an error derived from what it read is an answer too): pass it
  // to WaitDurable before acting on what was read. Thread-safe; a read inside a read on one thread
  // never waits for a connection.
  virtual Status Read(const std::function<Status(Connection&)>& body, int64_t& seen) = 0;
  // Returns once every commit numbered up to `seq` is durable. Errors: the engine cannot make
  // them durable. Thread-safe.
  virtual Status WaitDurable(int64_t seq) = 0;

  virtual EngineStats stats() const = 0;
  // Sizes in bytes of the database's files: the database itself and its write-ahead log (0
  // where there is none, or for a server-side database).
  virtual int64_t database_file_bytes() const = 0;
  virtual int64_t log_file_bytes() const = 0;
};

// Test seam shared by the datastore and its engine: named points that code passes inside
// transactions and engine steps (e.g. "ip_range_remove:checked", "group_commit:syncing"), where
// a test's hook may block to force an interleaving. Costs one relaxed load when no hook is set.
class SyncPoints {
 public:
  void Set(std::function<void(std::string_view)> hook) {
    MutexLock lock(mu_);
    hook_ = std::move(hook);
    set_.store(static_cast<bool>(hook_));
  }
  bool set() const { return set_.load(std::memory_order_relaxed); }
  void Pass(std::string_view name) {
    if (!set()) return;
    std::function<void(std::string_view)> hook;
    {
      MutexLock lock(mu_);
      hook = hook_;
    }
    if (hook) hook(name);
  }

 private:
  std::atomic<bool> set_{false};
  Mutex mu_;
  std::function<void(std::string_view)> hook_ FP_GUARDED_BY(mu_);
};

}  // namespace fp::db
