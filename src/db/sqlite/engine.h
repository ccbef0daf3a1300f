#pragma once

// The SQLite engine of the datastore (db/engine.h): one database file in WAL mode, written by
// one write lane that batches concurrent writes into one SQLite transaction and one sync of
// the log (group commit), read by a pool of connections (sqlite/reader_pool.h), its log kept
// bounded by a checkpointer (sqlite/checkpointer.h).

#include <array>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/random.h"
#include "db/engine.h"
#include "db/sqlite/checkpointer.h"
#include "db/sqlite/connection.h"
#include "db/sqlite/reader_pool.h"

namespace fp::db::sqlite {

class SqliteEngine final : public Engine {
 public:
  // Opens (creating as needed) the database at `path`, runs `migrate` on the write lane's
  // connection, makes the result durable and starts the checkpointer. `sync_points` must
  // outlive the engine. Errors: opening, migrating or the first sync failed.
  // `clock` and `random` (busy-retry backoff and its jitter) must outlive it too.
  static Result<std::unique_ptr<SqliteEngine>> Open(
      const std::string& path, SyncPoints& sync_points, const Clock& clock, Random& random,
      const std::function<Status(SqliteConnection&)>& migrate);
  ~SqliteEngine() override;

  // BEGIN IMMEDIATE on the write lane; see the write lane below.
  Status Write(const std::function<Status(Connection&)>& body) override;
  Status Read(const std::function<Status(Connection&)>& body, int64_t& seen) override;
  // Returns once every commit numbered up to `seq` is on disk, syncing the log if no sync that
  // covers it is already running (the leader syncs for everyone waiting: group commit).
  Status WaitDurable(int64_t seq) override;
  EngineStats stats() const override;
  int64_t database_file_bytes() const override;
  int64_t log_file_bytes() const override;

 private:
  SqliteEngine(std::string path, SyncPoints& sync_points, const Clock& clock, Random& random)
      : path_(std::move(path)),
        sync_points_(sync_points),
        clock_(clock),
        random_(random),
        readers_(path_) {}
  struct QueuedWrite;
  void RunWriteBatch(const std::vector<std::shared_ptr<QueuedWrite>>& batch)
      FP_EXCLUDES(queue_mu_, durable_mu_);
  Status SyncLog() FP_EXCLUDES(durable_mu_);  // fdatasync of the WAL file

  std::string path_;
  SyncPoints& sync_points_;
  const Clock& clock_;
  Random& random_;
  ReaderPool readers_;
  // Writes queue; a writer finding nobody writing leads a batch: it takes every queued write
  // (its own first) and runs them in order, each in a savepoint of one SQLite transaction, then
  // commits once, hands the lead to the first write queued meanwhile, waits until its batch is
  // durable and wakes the batch's writers. Pages the writes share (indexes, counters, the saga
  // tables) are written to the log once per batch instead of once per write. One batch at a time
  // within this process; SQLite's lock covers other processes. Writes always use writer_: a
  // connection's page cache is dropped whenever another connection wrote, so one writing connection
  // keeps it warm.
  Mutex queue_mu_;
  std::vector<std::shared_ptr<QueuedWrite>> queue_ FP_GUARDED_BY(queue_mu_);
  bool writing_ FP_GUARDED_BY(queue_mu_) = false;  // a batch is running
  std::unique_ptr<SqliteConnection> writer_;       // used only by the thread running a batch
  std::atomic<int64_t> sqlite_commits_{0};
  std::array<std::atomic<int64_t>, EngineStats::kBatchBuckets> batch_sizes_{};
  std::atomic<int64_t> batched_writes_{0};
  std::atomic<int64_t> durable_commits_{0};
  // Group commit. A write transaction takes a number before its COMMIT (commit_begun_) and
  // publishes it after (commit_done_); durable_ is the highest number known to be on disk.
  // Every transaction, reads included, waits until what it may have seen is durable before
  // its result leaves the datastore: no caller acts on a commit a crash could still undo.
  std::atomic<int64_t> commit_begun_{0};
  Mutex durable_mu_;
  std::condition_variable durable_cv_;  // a sync ended
  std::condition_variable commit_cv_;   // a commit was published (for commit_waiters_)
  int commit_waiters_ FP_GUARDED_BY(durable_mu_) = 0;
  std::atomic<int> sync_waiters_{0};      // waiting on durable_cv_ (EngineStats::sync_waiters)
  std::atomic<int> queued_writes_{0};     // waiting on their QueuedWrite::cv (queued_writes)
  std::atomic<int64_t> durable_seen_{0};  // durable_, readable without the lock
  int64_t commit_done_ FP_GUARDED_BY(durable_mu_) = 0;
  int64_t durable_ FP_GUARDED_BY(durable_mu_) = 0;
  bool syncing_ FP_GUARDED_BY(durable_mu_) = false;
  int wal_fd_ = -1;  // opened by the first sync; used only by the syncing leader
  std::atomic<int64_t> log_syncs_{0};
  // Declared last: stopped first, while writer_ it uses is still open.
  std::unique_ptr<Checkpointer> checkpointer_;
};

}  // namespace fp::db::sqlite
