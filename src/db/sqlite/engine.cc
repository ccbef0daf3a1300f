#include "db/sqlite/engine.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>

#include "common/uuid.h"

namespace fp::db::sqlite {

Result<std::unique_ptr<SqliteEngine>> SqliteEngine::Open(
    const std::string& path, SyncPoints& sync_points, const Clock& clock, Random& random,
    const std::function<Status(SqliteConnection&)>& migrate) {
  std::unique_ptr<SqliteEngine> engine(new SqliteEngine(path, sync_points, clock, random));
  engine->writer_ = FP_TRY(SqliteConnection::Open(path));
  FP_CHECK_OK(migrate(*engine->writer_));
  FP_CHECK_OK(engine->SyncLog());  // the migration's commits, and the WAL's directory entry
  engine->checkpointer_ = FP_TRY(Checkpointer::Start(path, *engine->writer_, sync_points, clock));
  return engine;
}

SqliteEngine::~SqliteEngine() {
  checkpointer_.reset();
  if (wal_fd_ >= 0) ::close(wal_fd_);
}

namespace {
int64_t FileBytes(const std::string& path) {
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  return ec ? 0 : static_cast<int64_t>(size);
}
}  // namespace

int64_t SqliteEngine::database_file_bytes() const { return FileBytes(path_); }
int64_t SqliteEngine::log_file_bytes() const { return FileBytes(path_ + "-wal"); }

EngineStats SqliteEngine::stats() const {
  EngineStats s;
  s.durable_commits = durable_commits_.load();
  s.engine_commits = sqlite_commits_.load();
  s.log_syncs = log_syncs_.load();
  s.checkpoints = checkpointer_->checkpoints();
  s.log_restarts = checkpointer_->log_restarts();
  s.log_limit_restarts = checkpointer_->log_limit_restarts();
  s.open_readers = readers_.open_readers();
  s.waiting_readers = readers_.waiting();
  s.sync_waiters = sync_waiters_.load();
  s.queued_writes = queued_writes_.load();
  for (size_t b = 0; b < batch_sizes_.size(); ++b) s.batch_sizes[b] = batch_sizes_[b].load();
  s.batched_writes = batched_writes_.load();
  return s;
}

Status SqliteEngine::SyncLog() {
  if (wal_fd_ < 0) {
    std::string wal = path_ + "-wal";
    wal_fd_ = ::open(wal.c_str(), O_RDONLY | O_CLOEXEC);
    if (wal_fd_ < 0) {
      return Fail(Error::Internal(
          fmt::format("cannot open the write-ahead log {}: {}", wal, std::strerror(errno))));
    }
    // The log was created by SQLite without a directory sync: make its name durable too.
    std::string dir = std::filesystem::path(path_).parent_path().string();
    int dir_fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd >= 0) {
      ::fsync(dir_fd);
      ::close(dir_fd);
    }
  }
  if (::fdatasync(wal_fd_) != 0) {
    // After a failed sync the kernel may have dropped the dirty pages, and a later sync can
    // report success without them: continuing could acknowledge commits that are not on disk.
    // Stop, and let the restart recover from what the disk really holds.
    std::fprintf(stderr,
                 "{\"level\":\"error\",\"msg\":\"cannot sync the write-ahead log; "
                 "stopping\",\"path\":\"%s-wal\",\"error\":\"%s\"}\n",
                 path_.c_str(), std::strerror(errno));
    std::abort();
  }
  log_syncs_.fetch_add(1);
  return Ok();
}

Status SqliteEngine::WaitDurable(int64_t seq) {
  if (durable_seen_.load() >= seq) return Ok();  // the common case for reads: nothing to wait for
  MutexLock lock(durable_mu_);
  while (durable_ < seq) {
    if (commit_done_ < seq) {
      // Commit `seq` is still being written (a reader saw it early): its writer wakes us.
      ++commit_waiters_;
      lock.Wait(commit_cv_);
      --commit_waiters_;
      continue;
    }
    if (syncing_) {
      sync_waiters_.fetch_add(1);
      lock.Wait(durable_cv_);  // the leader wakes everyone when its sync ends
      sync_waiters_.fetch_sub(1);
      continue;
    }
    // Lead: one sync makes every commit written so far durable.
    syncing_ = true;
    int64_t target = commit_done_;
    lock.Unlock();
    sync_points_.Pass("group_commit:syncing");
    Status synced = SyncLog();
    lock.Lock();
    syncing_ = false;
    if (synced) {
      durable_ = std::max(durable_, target);
      durable_seen_.store(durable_);
    }
    // Outside the lock: a waiter woken while it is held would only block on it again.
    lock.Unlock();
    durable_cv_.notify_all();
    FP_CHECK_OK(synced);
    lock.Lock();
  }
  return Ok();
}

struct SqliteEngine::QueuedWrite {
  explicit QueuedWrite(const std::function<Status(Connection&)>* b) : body(b) {}
  enum Turn : int { kWaiting = 0, kLead = 1, kDone = 2 };
  const std::function<Status(Connection&)>* body;
  Status result = Ok();
  int64_t seq = 0;        // the commit number of the batch that ran it
  bool numbered = false;  // seq is set (0 is a number: no commit before)
  // Set once, after the fields above, by the writer that hands this write the lead (kLead) or
  // that ran it and waited until its batch was durable (kDone), under this write's own mutex,
  // and signalled after letting go of it: woken, the write's thread runs at once instead of
  // waking only to sleep again on a mutex its waker still holds (a second context switch per
  // write). The waker holds a reference while it signals: the write's own thread may already
  // have seen the value and returned.
  Mutex mu;
  Turn wake FP_GUARDED_BY(mu) = kWaiting;
  std::condition_variable cv;

  void Wake(Turn how) {
    {
      MutexLock lock(mu);
      wake = how;
    }
    cv.notify_one();
  }
  Turn AwaitWake() {
    MutexLock lock(mu);
    lock.Wait(cv, [&]() FP_REQUIRES(mu) { return wake != kWaiting; });
    return wake;
  }
};

Status SqliteEngine::Write(const std::function<Status(Connection&)>& body) {
  sync_points_.Pass("tx:waiting_for_writer");
  auto me = std::make_shared<QueuedWrite>(&body);
  std::vector<std::shared_ptr<QueuedWrite>> batch;
  {
    MutexLock lock(queue_mu_);
    if (writing_) {
      queue_.push_back(me);
      if (sync_points_.set()) {
        lock.Unlock();  // the hook may wait for other writers to queue
        sync_points_.Pass("tx:queued");
        lock.Lock();
      }
      queued_writes_.fetch_add(1);
      lock.Unlock();
      const QueuedWrite::Turn wake = me->AwaitWake();
      queued_writes_.fetch_sub(1);
      // Another writer ran this write in its batch and waited until it was durable.
      if (wake == QueuedWrite::kDone) return me->result;
      lock.Lock();  // handed the lead: writing_ stayed set for this write
    }
    writing_ = true;
    batch.push_back(me);  // this write first, then every write queued behind the last batch
    for (std::shared_ptr<QueuedWrite>& w : queue_) batch.push_back(std::move(w));
    queue_.clear();
  }
  RunWriteBatch(batch);
  checkpointer_->AfterBatch();
  // The next batch starts while this one's sync runs, so that its commit joins the next sync.
  std::shared_ptr<QueuedWrite> next;
  {
    MutexLock lock(queue_mu_);
    if (queue_.empty()) {
      writing_ = false;
    } else {
      next = std::move(queue_.front());
      queue_.erase(queue_.begin());
    }
  }
  if (next) {
    next->Wake(QueuedWrite::kLead);
  }
  // The answers (results, or errors derived from what the writes read, possibly the effects of
  // earlier writes in the batch) leave only once the batch is durable. The writes of the batch
  // sleep until then and are woken once, here.
  Status durable = WaitDurable(me->numbered ? me->seq : commit_begun_.load());
  for (const std::shared_ptr<QueuedWrite>& w : batch) {
    if (!durable) w->result = durable;
    if (w == me) continue;
    w->Wake(QueuedWrite::kDone);
  }
  return me->result;
}

void SqliteEngine::RunWriteBatch(const std::vector<std::shared_ptr<QueuedWrite>>& batch) {
  using namespace std::chrono;
  SqliteConnection& conn = *writer_;
  // Another process holding the database's write lock: retry with jittered backoff.
  const MonoTime deadline = clock_.Deadline(seconds(30));
  auto backoff = milliseconds(1);
  Status began = conn.ExecScript("BEGIN IMMEDIATE");
  while (!began && conn.last_error_was_busy() && clock_.Monotonic() < deadline) {
    clock_.SleepFor(microseconds(
        random_.Below(static_cast<uint64_t>(duration_cast<microseconds>(backoff).count() + 1))));
    backoff = std::min(backoff * 2, duration_cast<milliseconds>(milliseconds(200)));
    began = conn.ExecScript("BEGIN IMMEDIATE");
  }
  if (!began) {
    for (const std::shared_ptr<QueuedWrite>& w : batch) w->result = began;
    return;
  }
  int64_t committed = 0;
  // The error after which SQLite ended the transaction (disk full, I/O): every later write of
  // the batch fails with it (a full disk is retryable for all of them alike).
  std::optional<Error> aborted_by;
  auto aborted = [&] {
    return aborted_by ? aborted_by->WithContext(
                            "the write transaction was aborted by an "
                            "earlier write's error")
                      : Error::Internal("the write transaction was aborted by an earlier error");
  };
  for (const std::shared_ptr<QueuedWrite>& w : batch) {
    if (!conn.InTransaction()) {
      // SQLite ended the transaction after an error: nothing more can join.
      w->result = Fail(aborted());
      continue;
    }
    Status s = conn.ExecScript("SAVEPOINT write");
    if (s) {
      try {
        s = (*w->body)(conn);
      } catch (const std::exception& e) {
        // It runs on this thread for another caller: an exception must not escape here.
        s = Fail(Error::Internal(fmt::format("write transaction failed: {}", e.what())));
      } catch (...) {
        s = Fail(Error::Internal("write transaction failed with an unknown exception"));
      }
      if (s) s = conn.ExecScript("RELEASE write");
      if (!s && conn.InTransaction()) {
        // Undo this write only; the batch's other writes stay. If the undo itself fails, the
        // write's partial effects could reach the COMMIT: give up the whole batch instead.
        Status undone = conn.ExecScript("ROLLBACK TO write");
        if (undone) undone = conn.ExecScript("RELEASE write");
        if (!undone) (void)conn.ExecScript("ROLLBACK");
      }
    }
    // Only the disk's error (full, I/O) is every write's; one write's own refusal is not.
    if (!s && !conn.InTransaction() && !aborted_by &&
        s.error().kind() == ErrorKind::kServiceUnavailable) {
      aborted_by = s.error();
    }
    w->result = s;
    if (s) ++committed;
  }
  // Every write of the batch refused (a 4xx decided inside the transaction): nothing to
  // write to the log, nor to sync. Their answers were decided on commits made before, so they
  // wait only for those (the previous batch's sync may still be running). If the rollback
  // fails, the empty transaction is committed as any other.
  if (committed == 0 && conn.InTransaction() && conn.ExecScript("ROLLBACK")) {
    const int64_t before = commit_begun_.load();
    for (const std::shared_ptr<QueuedWrite>& w : batch) {
      w->seq = before;
      w->numbered = true;
    }
    return;
  }
  // Numbered before COMMIT: a reader that sees this commit also sees its number.
  const int64_t seq = commit_begun_.fetch_add(1) + 1;
  // If SQLite (or a failed undo) ended the transaction, writes reported as done so far were
  // rolled back with it.
  Status commit = conn.InTransaction() ? conn.ExecScript("COMMIT") : Status(Fail(aborted()));
  if (!commit) {
    if (conn.InTransaction()) (void)conn.ExecScript("ROLLBACK");
    // Nothing of the batch is kept, and a failed write may have read what others wrote.
    for (const std::shared_ptr<QueuedWrite>& w : batch) w->result = commit;
    committed = 0;
  }
  for (const std::shared_ptr<QueuedWrite>& w : batch) {
    w->seq = seq;
    w->numbered = true;
  }
  durable_commits_.fetch_add(committed);
  sqlite_commits_.fetch_add(1);
  size_t bucket = 0;
  while (bucket + 1 < batch_sizes_.size() && (size_t{1} << bucket) < batch.size()) ++bucket;
  batch_sizes_[bucket].fetch_add(1);
  batched_writes_.fetch_add(static_cast<int64_t>(batch.size()));
  bool waiters = false;
  {
    MutexLock lock(durable_mu_);
    commit_done_ = seq;  // written to the log (or failed): a sync may now cover it
    waiters = commit_waiters_ > 0;
  }
  // Only readers that saw this commit before it was published wait for it (rarely): waking
  // every thread waiting for a sync at each commit would cost a context switch per waiter.
  if (waiters) commit_cv_.notify_all();
}

Status SqliteEngine::Read(const std::function<Status(Connection&)>& body, int64_t& seen) {
  using namespace std::chrono;
  const MonoTime deadline = clock_.Deadline(seconds(30));
  auto backoff = milliseconds(1);
  for (;;) {
    auto conn = FP_TRY(readers_.Acquire());
    Status result = conn->BeginRead();
    bool began = static_cast<bool>(result);
    if (began) {
      result = body(*conn);
      if (result) result = conn->ExecScript("COMMIT");
    }
    bool busy = !result && conn->last_error_was_busy();
    if (!result && began) (void)conn->ExecScript("ROLLBACK");
    readers_.Release(std::move(conn));
    if (!result && busy && clock_.Monotonic() < deadline) {
      // Full jitter: sleep uniformly in [0, backoff), then double up to a cap.
      clock_.SleepFor(microseconds(
          random_.Below(static_cast<uint64_t>(duration_cast<microseconds>(backoff).count() + 1))));
      backoff = std::min(backoff * 2, duration_cast<milliseconds>(milliseconds(200)));
      continue;
    }
    // Every commit this read could have seen is numbered at most this (see WaitDurable).
    seen = commit_begun_.load();
    return result;
  }
}

}  // namespace fp::db::sqlite
