#pragma once

// The PostgreSQL engine of the datastore (db/engine.h): a pool of libpq connections to one
// database (or a multi-host URL that libpq resolves to the read-write server), every
// transaction SERIALIZABLE and retried whole on conflicts, lost connections and unknown commit
// outcomes resolved without running a write twice.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/random.h"
#include "common/uuid.h"
#include "db/datastore.h"
#include "db/engine.h"
#include "db/postgres/connection.h"

namespace fp::db::postgres {

// Writes run `BEGIN ISOLATION LEVEL SERIALIZABLE`, reads `... SERIALIZABLE READ ONLY`, each with
// statement_timeout and lock_timeout set to what is left of PostgresOptions::retry_deadline
// (and idle_in_transaction_session_timeout a little longer). The whole body is run again when
// a statement or the COMMIT fails with 40001 (serialization failure) or 40P01 (deadlock), a
// statement outlasts its timeout (57014, 55P03), or the connection is lost before COMMIT was
// sent: after a conflict queued behind the `retry_queue` lock (taken before the snapshot)
// without backoff, otherwise with full-jitter exponential backoff; a retry after a lost
// connection first ends the old server process. Past the deadline the transaction fails with
// Unavailable (503), never Internal. A body error that is none of these is returned as it is
// (after ROLLBACK). So a body may run several times: it must keep nothing from a failed run
// outside the database (see Engine::Write).
//
// Unknown outcome. A connection lost while COMMIT was in flight may or may not have committed.
// Every write transaction first inserts a row into commit_marker with a UUID chosen once per
// Write (outside the retries); after such a loss the engine connects again, makes sure the old
// server process is gone (terminating it if it lingers, so that its COMMIT cannot land after
// the check), and looks for the marker: there, the write committed and is not run again;
// absent, it did not and is retried. Markers older than an hour are deleted in the background
// of writes (one DELETE at most every minute), long after any such question is settled.
//
// Connections: at most PostgresOptions::pool_size, opened when first needed; a lost one is
// dropped (with every idle one, which a restarted server has closed too) and replaced by the
// next transaction. A transaction started on a thread that already holds one of this engine's
// connections (a read inside a write) gets a connection beyond the pool instead of waiting,
// so nesting cannot deadlock the pool.
//
// COMMIT is durable when it returns: WaitDurable returns at once and the commit numbers are 0.
class PgEngine final : public Engine {
 public:
  // Connects to `url`, runs `migrate` on that connection and keeps it in the pool. Errors:
  // Unavailable when no server answers; what `migrate` returns.
  static Result<std::unique_ptr<PgEngine>> Open(
      const std::string& url, const PostgresOptions& options, SyncPoints& sync_points,
      const Clock& clock, Random& random, const std::function<Status(PgConnection&)>& migrate);
  ~PgEngine() override;

  Status Write(const std::function<Status(Connection&)>& body) override;
  Status Read(const std::function<Status(Connection&)>& body, int64_t& seen) override;
  Status WaitDurable(int64_t) override { return Ok(); }
  EngineStats stats() const override;
  // The database's size on the server (pg_database_size), read on a pooled connection; 0 when
  // it cannot be read now.
  int64_t database_file_bytes() const override;
  // The server's write-ahead log is shared by every database of the cluster: not this
  // database's to report (0).
  int64_t log_file_bytes() const override { return 0; }

  // Test seams. The next write's COMMIT is "lost": kBeforeCommit closes the connection instead
  // of sending COMMIT (the server rolls back); kAfterCommit sends COMMIT, then closes the
  // connection as if the answer never came. Either way the engine must find out by the marker.
  enum class CommitLoss { kNone, kBeforeCommit, kAfterCommit };
  void TEST_LoseNextCommit(CommitLoss loss) { lose_commit_.store(loss); }
  // Write transactions run (attempts, including retries) and retries made, since open.
  int64_t TEST_write_attempts() const { return write_attempts_.load(); }
  int64_t TEST_retries() const { return retries_.load(); }

 private:
  PgEngine(std::string url, PostgresOptions options, SyncPoints& sync_points, const Clock& clock,
           Random& random)
      : url_(std::move(url)),
        options_(options),
        sync_points_(sync_points),
        clock_(clock),
        random_(random) {}

  struct Lease;
  // A connection for one transaction: an idle one, a new one while fewer than pool_size are
  // open and no other is being opened, else waits for one to be released (or for the one
  // being opened) until `deadline`. Unavailable when a new connection fails or the one being
  // opened was still being opened at the deadline (sets `busy` false: the database is hard to
  // reach), or none was released in time from a full pool (`busy` true).
  Result<std::unique_ptr<PgConnection>> Acquire(bool& overflow, bool& busy, MonoTime deadline);
  void Release(std::unique_ptr<PgConnection> conn, bool overflow);
  // After a lost COMMIT: true if the transaction that inserted `marker` committed. Unavailable
  // when that cannot be decided before `deadline`.
  Result<bool> Committed(const Uuid& marker, int old_pid, const std::string& old_start,
                         MonoTime deadline);
  void PruneMarkersIfDue();
  // Runs `body` in a transaction opened by `begin` with retries; `marker` for writes only.
  Status Run(bool write, const std::function<Status(Connection&)>& body);

  const std::string url_;
  const PostgresOptions options_;
  SyncPoints& sync_points_;
  const Clock& clock_;
  Random& random_;
  // Full jitter: a uniform sleep in [0, backoff), capped by the time left; then doubles it.
  void Backoff(std::chrono::microseconds& backoff, MonoTime deadline) const;

  mutable Mutex mu_;
  std::condition_variable released_;
  std::vector<std::unique_ptr<PgConnection>> idle_ FP_GUARDED_BY(mu_);
  int open_ FP_GUARDED_BY(mu_) = 0;     // pooled connections open (or being opened)
  int opening_ FP_GUARDED_BY(mu_) = 0;  // being opened: at most one
  int waiting_ FP_GUARDED_BY(mu_) = 0;  // transactions waiting for a connection
  std::atomic<int> overflow_open_{0};

  std::atomic<int64_t> durable_commits_{0};
  std::atomic<int64_t> write_attempts_{0};
  std::atomic<int64_t> retries_{0};
  std::atomic<int64_t> queued_transactions_{0};
  std::atomic<int64_t> round_trips_{0};
  std::atomic<CommitLoss> lose_commit_{CommitLoss::kNone};
  std::atomic<int64_t> next_prune_us_{0};  // the clock's monotonic time, microseconds
};

}  // namespace fp::db::postgres
