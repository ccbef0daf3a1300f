#include "db/postgres/engine.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/uuid.h"

namespace fp::db::postgres {

using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;

namespace {

// The engines whose connection the calling thread holds (innermost last): a transaction begun
// inside another on the same thread must not wait for the pool.
thread_local std::vector<const PgEngine*> held_by_thread;

struct HeldMark {
  explicit HeldMark(const PgEngine* e) { held_by_thread.push_back(e); }
  ~HeldMark() { held_by_thread.pop_back(); }
  HeldMark(const HeldMark&) = delete;
  HeldMark& operator=(const HeldMark&) = delete;
};

}  // namespace

Result<std::unique_ptr<PgEngine>> PgEngine::Open(
    const std::string& url, const PostgresOptions& options, SyncPoints& sync_points,
    const Clock& clock, Random& random, const std::function<Status(PgConnection&)>& migrate) {
  PostgresOptions o = options;
  o.pool_size = std::max(1, o.pool_size);
  std::unique_ptr<PgEngine> engine(new PgEngine(url, o, sync_points, clock, random));
  auto conn = FP_TRY(PgConnection::Open(url));
  FP_CHECK_OK(migrate(*conn));
  conn->CountRoundTripsIn(&engine->round_trips_);
  MutexLock lock(engine->mu_);
  engine->idle_.push_back(std::move(conn));
  engine->open_ = 1;
  return engine;
}

PgEngine::~PgEngine() = default;

EngineStats PgEngine::stats() const {
  EngineStats s;
  s.durable_commits = durable_commits_.load();
  // Each write is a transaction of its own: every batch carries one.
  s.batch_sizes[0] = s.durable_commits;
  s.batched_writes = s.durable_commits;
  s.round_trips = round_trips_.load();
  s.retries = retries_.load();
  s.queued_transactions = queued_transactions_.load();
  MutexLock lock(mu_);
  s.open_readers = open_ + overflow_open_.load();
  s.waiting_readers = waiting_;
  return s;
}

int64_t PgEngine::database_file_bytes() const {
  int64_t bytes = 0;
  int64_t seen = 0;
  // A read like any other; the pool it borrows from is the engine's machinery, not its state.
  Status read = const_cast<PgEngine*>(this)->Read(
      [&](Connection& c) -> Status {
        auto rows = FP_TRY(c.Query("SELECT pg_database_size(current_database())", {}));
        if (!rows.empty()) bytes = rows.front().Int(0);
        return Ok();
      },
      seen);
  return read ? bytes : 0;
}

void PgEngine::Backoff(microseconds& backoff, MonoTime deadline) const {
  auto left = duration_cast<microseconds>(clock_.Left(deadline));
  auto cap = std::min(backoff, left);
  if (cap.count() > 0) {
    clock_.SleepFor(microseconds(random_.Below(static_cast<uint64_t>(cap.count() + 1))));
  }
  backoff = std::min(backoff * 2, duration_cast<microseconds>(milliseconds(250)));
}

Result<std::unique_ptr<PgConnection>> PgEngine::Acquire(bool& overflow, bool& busy,
                                                        MonoTime deadline) {
  busy = false;
  overflow = std::find(held_by_thread.begin(), held_by_thread.end(), this) != held_by_thread.end();
  if (overflow) {
    auto conn = PgConnection::Open(url_);
    if (conn) {
      overflow_open_.fetch_add(1);
      (*conn)->CountRoundTripsIn(&round_trips_);
    }
    return conn;
  }
  {
    MutexLock lock(mu_);
    // One connection is opened at a time: the others wait for it, or for one released
    // meanwhile, whichever comes first. A new backend costs PostgreSQL a process (some 37 ms of
    // CPU on a 2-core virtual machine, 2026-12-06) and a transaction holds a connection for a
    // millisecond or two, so a burst of borrowers (a server's loops at its start, a burst of
    // requests) is mostly served by the connections already open: a server's start opened
    // five, now two or three. The pool still grows, a connection at a time, while borrowers wait.
    auto ready = [&]() FP_REQUIRES(mu_) {
      return !idle_.empty() || (open_ < options_.pool_size && opening_ == 0);
    };
    bool got = ready();
    if (!got) {
      ++waiting_;
      got = clock_.WaitUntil(lock, released_, deadline, ready);
      --waiting_;
    }
    if (!got) {
      if (opening_ > 0) {
        // Not busy: the connection being opened (the last free place in the pool, perhaps) is
        // what took so long.
        return Fail(Error::Unavailable(
            "no new connection to the database could be opened in time (another was still "
            "being opened)"));
      }
      busy = true;
      return Fail(Error::Unavailable(fmt::format(
          "all {} of this server's database connections stayed in use", options_.pool_size)));
    }
    if (!idle_.empty()) {
      auto conn = std::move(idle_.back());
      idle_.pop_back();
      return conn;
    }
    ++open_;
    ++opening_;
  }
  // However the opening ends (an exception included), its place is given back, and the next
  // waiter may open one.
  bool opened = false;
  struct EndOpening {
    std::function<void()> end;
    ~EndOpening() { end(); }
  } end_opening{[&] {
    MutexLock lock(mu_);
    --opening_;
    if (!opened) --open_;
    released_.notify_all();
  }};
  sync_points_.Pass("pg:opening_connection");
  auto conn = PgConnection::Open(url_);
  if (conn) {
    (*conn)->CountRoundTripsIn(&round_trips_);
    opened = true;
  }
  return conn;
}

void PgEngine::Release(std::unique_ptr<PgConnection> conn, bool overflow) {
  if (overflow) {
    conn.reset();
    overflow_open_.fetch_sub(1);
    return;
  }
  std::vector<std::unique_ptr<PgConnection>> dropped;
  {
    MutexLock lock(mu_);
    if (conn && !conn->broken()) {
      idle_.push_back(std::move(conn));
    } else {
      // Lost: the server restarted or failed over, and the idle connections are most likely
      // lost with it. They are reopened as transactions need them.
      --open_;
      open_ -= static_cast<int>(idle_.size());
      dropped = std::move(idle_);
      idle_.clear();
    }
    released_.notify_all();
  }
  // `conn` and `dropped` close here, outside the lock.
}

Result<bool> PgEngine::Committed(const Uuid& marker, int old_pid, const std::string& old_start,
                                 MonoTime deadline) {
  sync_points_.Pass("postgres:finding_out_a_lost_commit");
  microseconds backoff = milliseconds(1);
  std::string problem = "no attempt";
  while (clock_.Monotonic() < deadline) {
    auto conn = PgConnection::Open(url_);
    if (!conn) {
      problem = conn.error().message();
      Backoff(backoff, deadline);
      continue;
    }
    PgConnection& c = **conn;
    // The old server process may still be running the COMMIT (a connection lost on the client's
    // side only): once it is gone, what it committed is settled.
    bool gone = old_pid == 0;
    if (!gone) {
      auto terminated = c.Query(
          "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = ? AND "
          "backend_start::text = ?",
          {int64_t{old_pid}, old_start});
      if (!terminated) problem = terminated.error().message();
    }
    microseconds poll = microseconds(200);
    while (!gone && !c.broken() && clock_.Monotonic() < deadline) {
      auto left =
          c.Query("SELECT 1 FROM pg_stat_activity WHERE pid = ? AND backend_start::text = ?",
                  {int64_t{old_pid}, old_start});
      if (!left) {
        problem = left.error().message();
        break;
      }
      if (left->empty()) {
        gone = true;
        break;
      }
      Backoff(poll, deadline);
    }
    if (!gone) continue;
    auto found = c.Query("SELECT 1 FROM commit_marker WHERE id = ?", {marker.ToString()});
    if (found && found->empty()) return false;
    if (found) {
      // Committed, but perhaps only locally: a session ended while it waited for a synchronous
      // standby has committed on the primary alone. A commit of our own waits for the standby
      // to hold everything up to it, that one included, before the write is acknowledged.
      Status replicated = c.Run(fmt::format(
          "BEGIN; INSERT INTO commit_marker (id, time_created) VALUES ('{}', now()); COMMIT",
          random_.NewUuid().ToString()));
      if (replicated) return true;
      problem = replicated.error().message();
    } else {
      problem = found.error().message();
    }
    Backoff(backoff, deadline);
  }
  return Fail(Error::Unavailable(fmt::format(
      "the connection to PostgreSQL was lost while a write was committing, and whether it "
      "committed could not be found out ({}); check the state before retrying",
      problem)));
}

void PgEngine::PruneMarkersIfDue() {
  int64_t now = duration_cast<microseconds>(clock_.Monotonic().time_since_epoch()).count();
  int64_t due = next_prune_us_.load();
  if (now < due) return;
  if (!next_prune_us_.compare_exchange_strong(due, now + 60'000'000)) return;  // another does it
  bool overflow = false;
  bool busy = false;
  auto conn = Acquire(overflow, busy, clock_.Monotonic() + milliseconds(100));
  if (!conn) return;
  HeldMark held(this);
  // Outside any SERIALIZABLE transaction: the writes that insert markers never read the table,
  // so this cannot make them conflict. A failure is harmless: the next prune deletes them.
  (void)(*conn)->Run("DELETE FROM commit_marker WHERE time_created < now() - interval '1 hour'");
  Release(std::move(*conn), overflow);
}

Status PgEngine::Write(const std::function<Status(Connection&)>& body) {
  // The sync point SQLite's write lane passes before it waits for the writer: the race tests
  // hold one transaction until the others got this far. Here they then run concurrently, and
  // SERIALIZABLE (with the retries) decides.
  sync_points_.Pass("tx:waiting_for_writer");
  return Run(true, body);
}

Status PgEngine::Read(const std::function<Status(Connection&)>& body, int64_t& seen) {
  seen = 0;  // COMMIT is durable when it returns: there is nothing to wait for
  return Run(false, body);
}

Status PgEngine::Run(bool write, const std::function<Status(Connection&)>& body) {
  const auto start = clock_.Monotonic();
  const auto deadline = start + options_.retry_deadline;
  // Chosen once: every attempt of this write carries the same marker, so a lost COMMIT is
  // resolved by looking for it whichever attempt it was.
  const Uuid marker = random_.NewUuid();
  // A write that failed on a conflict (40001, 40P01) runs its next attempts queued, without
  // the backoff: the lock, taken before the first statement fixes the snapshot, lets one
  // queued attempt run at a time, and each sees the ones before it committed instead of
  // colliding with them again. Queued attempts still race the first attempts of other writes,
  // which do not queue, so that writes that do not collide are not serialized. Measured with
  // bench_attach at 16 clients: attach p99 about 1 s with backoff alone, 170 ms queued.
  //
  // No statement, and no lock wait, outlasts the deadline: a blocked or lost one ends in a
  // timeout, retried and then answered 503, instead of holding the request (or the saga
  // coordinator's thread) for as long as it lasts.
  // The transaction's opening statements, sent with its first statement (PgConnection::
  // DeferBegin): one exchange for both.
  auto begin = [&]() {
    const int64_t left =
        std::max<int64_t>(1, duration_cast<milliseconds>(deadline - clock_.Monotonic()).count());
    // And a session left idle in the transaction (its client gone before COMMIT) is ended by
    // the server soon after the deadline, releasing what it holds.
    std::vector<std::string> statements = {
        fmt::format("BEGIN ISOLATION LEVEL SERIALIZABLE{}", write ? "" : " READ ONLY"),
        fmt::format("SET LOCAL statement_timeout = {}", left),
        fmt::format("SET LOCAL lock_timeout = {}", left),
        fmt::format("SET LOCAL idle_in_transaction_session_timeout = {}", left + 10000)};
    return statements;
  };
  bool queued = false;
  // The server process of an attempt whose connection was lost before its COMMIT: it cannot
  // commit, but until it notices the loss it holds its locks (this write's marker row among
  // them), which the next attempt would wait on. Ended from the next attempt's connection.
  int lost_pid = 0;
  std::string lost_start;
  microseconds backoff = milliseconds(1);
  std::string problem;
  // Whether the last attempt failed for want of a connection (the database down, restarting
  // or failing over) rather than on a conflict: the final answer says which.
  bool unreachable = false;
  // Whether the last attempt failed on a conflict: only then does the next one, queued, skip
  // the backoff (a lost connection or a refused connect backs off, queued or not).
  bool last_conflict = false;
  for (int attempt = 0;; ++attempt) {
    if (attempt > 0) {
      retries_.fetch_add(1);
      if (clock_.Monotonic() >= deadline) {
        return Fail(Error::Unavailable(fmt::format(
            "the database {} the {} now (retried {} times over {} ms: {}); retry the request",
            unreachable ? "cannot be reached to complete" : "is too busy to complete",
            write ? "write" : "read", attempt - 1,
            duration_cast<milliseconds>(clock_.Monotonic() - start).count(), problem)));
      }
      // A queued attempt waits for the lock instead.
      if (!(queued && last_conflict)) Backoff(backoff, deadline);
    }
    bool overflow = false;
    bool busy = false;
    auto acquired = Acquire(overflow, busy, deadline);
    if (!acquired) {
      problem = acquired.error().message();
      unreachable = !busy;
      last_conflict = false;
      continue;
    }
    std::unique_ptr<PgConnection> conn = std::move(*acquired);
    Status done = Ok();
    {
      HeldMark held(this);
      conn->StartAttempt();
      if (write) write_attempts_.fetch_add(1);
      if (lost_pid != 0) {
        // No match (it is gone, or this is another server after a failover) is fine.
        (void)conn->Query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = ? AND "
            "backend_start::text = ?",
            {int64_t{lost_pid}, lost_start});
        lost_pid = 0;
      }
      std::vector<std::string> opening = begin();
      const size_t snapshot_at = opening.size();
      conn->DeferBegin(std::move(opening), snapshot_at, write);
      // A write's snapshot is taken by its commit marker's INSERT, held back to go with the
      // opening (a prepared statement: as one of the opening's texts it was planned at every
      // write).
      if (write) {
        done = conn->DeferOpening("INSERT INTO commit_marker (id, time_created) VALUES (?, now())",
                                  {marker.ToString()});
      }
      // The write queue: a write retried after a conflict waits there, and one whose body asks
      // (Connection::JoinWriteQueue; no saga action does since NAT versions come from a
      // sequence, db/nat.h). Never a read: it would hold up every write in the queue for as
      // long as it runs.
      if (write && queued) conn->JoinWriteQueue();
      if (done) {
        try {
          done = body(*conn);
        } catch (const std::exception& e) {
          done = Fail(Error::Internal(fmt::format("transaction failed: {}", e.what())));
        } catch (...) {
          done = Fail(Error::Internal("transaction failed with an unknown exception"));
        }
      }
      // A statement error the body did not pass on still aborted the transaction: COMMIT
      // would roll it back while answering "COMMIT" succeeded.
      // A held-back write's own error (e.g. a saga write refused to a former owner) says more.
      if (done && !conn->broken() && conn->failed_transaction()) {
        done = Fail(conn->held_back_failure().value_or(
            Error::Internal("a statement of the transaction failed; it was rolled back")));
      }
    }
    last_conflict = conn->retryable();
    if (conn->retryable()) queued = true;
    if (!done || conn->broken() || conn->retryable()) {
      if (conn->queue_sent()) queued_transactions_.fetch_add(1);
      bool retry = conn->broken() || conn->retryable();
      unreachable = conn->broken();
      if (conn->broken()) {
        lost_pid = conn->backend_pid();
        lost_start = conn->backend_start();
      }
      const bool begun = !conn->begin_pending();
      conn->DropPending();  // what is still held back was never sent
      // Not after a failed COMMIT (QueryLast's), which ended the transaction itself.
      if (begun && !conn->broken() && conn->in_transaction()) (void)conn->Run("ROLLBACK");
      Release(std::move(conn), overflow);
      if (!retry) return done;
      problem = done ? std::string("connection lost") : done.error().message();
      continue;
    }
    if (conn->begin_pending() && !conn->writes_held_back()) {
      // The body ran no statement: nothing was begun, so there is nothing to commit.
      conn->DropPending();
      Release(std::move(conn), overflow);
      return Ok();
    }
    // COMMIT. From here a lost connection leaves the outcome unknown.
    if (write) sync_points_.Pass("postgres:committing");
    const int pid = conn->backend_pid();
    const std::string backend_start = conn->backend_start();
    CommitLoss loss = write ? lose_commit_.exchange(CommitLoss::kNone) : CommitLoss::kNone;
    Status commit = Ok();
    bool lost = false;
    if (loss == CommitLoss::kBeforeCommit) {
      lost = true;
    } else if (conn->ended()) {
      // A read's last statement (QueryLast) carried its COMMIT, which succeeded.
    } else {
      // With the writes the body held back (ExecLater), in one exchange.
      commit = conn->Commit();
      // Lost only before the server answered the COMMIT: a connection lost afterwards (in a
      // read after the commit) leaves nothing to find out.
      lost = (conn->broken() && !conn->commit_acknowledged()) ||
             (commit && loss == CommitLoss::kAfterCommit);
    }
    if (conn->queue_sent()) queued_transactions_.fetch_add(1);
    last_conflict = conn->retryable();
    if (conn->retryable()) queued = true;
    if (!lost) {
      bool retry = !commit && conn->retryable();
      // A held-back write failed before the COMMIT, which then never ran.
      if (!commit && conn->in_transaction()) (void)conn->Run("ROLLBACK");
      Release(std::move(conn), overflow);
      if (commit) {
        if (write) {
          durable_commits_.fetch_add(1);
          PruneMarkersIfDue();
        }
        return Ok();
      }
      if (!retry) return commit;
      unreachable = false;
      problem = commit.error().message();
      continue;
    }
    conn.reset();  // closed: its server process ends, or is ended by Committed
    Release(nullptr, overflow);
    last_conflict = false;
    if (!write) {
      problem = "connection lost at COMMIT";
      unreachable = true;
      continue;  // a read has nothing to commit: run it again
    }
    bool committed = FP_TRY(Committed(marker, pid, backend_start,
                                      std::max(deadline, clock_.Monotonic() + milliseconds(2000))));
    if (committed) {
      durable_commits_.fetch_add(1);
      return Ok();
    }
    unreachable = true;
    problem = "connection lost at COMMIT; the write had not committed";
  }
}

}  // namespace fp::db::postgres
