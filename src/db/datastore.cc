#include "db/datastore.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/evp.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "db/idempotency.h"
#include "db/schema.h"

namespace fp::db {

namespace {
// After a background checkpoint, the write lane waits at most kRestartBudget for readers to
// leave the log so that it can start over. It tries after at most kRestartAttempts batches,
// then gives up until the next checkpoint.
constexpr auto kRestartBudget = std::chrono::milliseconds(2);
constexpr int kRestartAttempts = 8;
// With the log at kLogLimitFrames, the write lane waits at most this long for the background
// checkpoint and for readers before it gives up until the next batch.
constexpr auto kLogLimitBudget = std::chrono::seconds(1);
}  // namespace

Result<Uuid> UuidColumn(const Row& row, size_t i) {
  auto id = Uuid::Parse(row.Text(i));
  if (!id) return Fail(Error::Internal(fmt::format("corrupt uuid column {}", i)));
  return *id;
}

Result<std::optional<Uuid>> OptUuidColumn(const Row& row, size_t i) {
  if (row.IsNull(i)) return std::optional<Uuid>();
  return std::optional<Uuid>(FP_TRY(UuidColumn(row, i)));
}

Result<IpAddr> IpColumn(const Row& row, size_t i) {
  auto ip = IpAddr::FromKey(row.Text(i));
  if (!ip) return Fail(Error::Internal(fmt::format("corrupt address column {}", i)));
  return *ip;
}

std::string HashToken(const std::string& secret) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(secret.data(), secret.size(), digest, &len, EVP_sha256(), nullptr);
  std::string hex;
  hex.reserve(len * 2);
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

Datastore::Datastore(std::string path, std::shared_ptr<const Clock> clock)
    : path_(std::move(path)), clock_(std::move(clock)) {}

Datastore::~Datastore() {
  {
    std::lock_guard lock(checkpoint_mu_);
    checkpoint_stop_ = true;
  }
  checkpoint_cv_.notify_all();
  if (checkpointer_.joinable()) checkpointer_.join();
  if (wal_fd_ >= 0) ::close(wal_fd_);
}

Result<std::unique_ptr<Datastore>> Datastore::OpenSqlite(const std::string& path,
                                                         std::shared_ptr<const Clock> clock) {
  std::unique_ptr<Datastore> ds(new Datastore(path, std::move(clock)));
  ds->writer_ = FP_TRY(SqliteConnection::Open(path));
  FP_CHECK_OK(MigrateSchema(*ds->writer_));
  FP_CHECK_OK(ds->SyncLog());  // the migration's commits, and the WAL's directory entry
  ds->checkpoint_conn_ = FP_TRY(SqliteConnection::Open(path));
  Datastore* self = ds.get();
  ds->writer_->SetWalHook([self](int frames) {
    self->log_frames_ = frames;
    // Once per kCheckpointFrames of growth (the log starts over after a complete checkpoint),
    // not at every commit while a reader keeps the log from starting over.
    if (frames < self->frames_at_request_) self->frames_at_request_ = 0;
    if (frames - self->frames_at_request_ < kCheckpointFrames) return;
    self->frames_at_request_ = frames;
    {
      std::lock_guard lock(self->checkpoint_mu_);
      self->checkpoint_wanted_ = true;
    }
    self->checkpoint_cv_.notify_one();
  });
  // A library's background thread: process signals (SIGTERM, SIGINT) belong to the threads the
  // program chose, never to this one. It inherits the mask in force when it starts.
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &before);
  ds->checkpointer_ = std::thread([self] { self->CheckpointLoop(); });
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  return ds;
}

void Datastore::CheckpointLoop() {
  std::unique_lock lock(checkpoint_mu_);
  for (;;) {
    checkpoint_cv_.wait(lock, [&] { return checkpoint_wanted_ || checkpoint_stop_; });
    if (checkpoint_stop_) return;
    checkpoint_wanted_ = false;
    lock.unlock();
    SyncPoint("checkpoint:copying");
    // PASSIVE: copies what no reader still needs; the next request copies the rest. Once all
    // is copied, the next write starts the log over from its beginning.
    Status done = Ok();
    {
      std::lock_guard copying(copying_mu_);
      done = checkpoint_conn_->CheckpointPassive();
    }
    if (done) {
      checkpoints_.fetch_add(1);
      restart_wanted_.store(true);
    } else if (!checkpoint_conn_->last_error_was_busy()) {
      WarnCheckpointFailed(done.error());
    }
    lock.lock();
  }
}

namespace {
thread_local int readers_held = 0;  // read connections this thread holds (any datastore)
thread_local Datastore::DeferredDurability* deferred_durability = nullptr;
}  // namespace

Datastore::DeferredDurability::DeferredDurability(Datastore& ds)
    : ds_(ds), outer_(deferred_durability) {
  deferred_durability = this;
}

Datastore::DeferredDurability::~DeferredDurability() {
  deferred_durability = outer_;
  if (seen_ == 0) return;
  if (Status s = ds_.WaitDurable(seen_); !s) {
    // The log cannot be opened (a failed sync stops the process in SyncLog): the answer about
    // to leave could describe commits a crash would undo. Stop, as SyncLog does.
    std::fprintf(stderr,
                 "{\"level\":\"error\",\"msg\":\"cannot make what a request read durable; "
                 "stopping\",\"path\":\"%s\",\"error\":\"%s\"}\n",
                 ds_.path_.c_str(), s.error().message().c_str());
    std::abort();
  }
}

Result<std::unique_ptr<SqliteConnection>> Datastore::Acquire() {
  {
    std::unique_lock lock(pool_mu_);
    if (readers_held == 0) {
      pool_cv_.wait(lock, [&] { return !idle_.empty() || open_readers_ < kMaxReaders; });
    }
    if (!idle_.empty()) {
      auto conn = std::move(idle_.back());
      idle_.pop_back();
      ++readers_held;
      return conn;
    }
    ++open_readers_;
  }
  auto opened = SqliteConnection::Open(path_);
  if (!opened) {
    {
      std::lock_guard lock(pool_mu_);
      --open_readers_;
    }
    pool_cv_.notify_one();
    return opened;
  }
  ++readers_held;
  return opened;
}

void Datastore::Release(std::unique_ptr<SqliteConnection> conn) {
  --readers_held;
  {
    std::lock_guard lock(pool_mu_);
    idle_.push_back(std::move(conn));
  }
  pool_cv_.notify_one();
}

namespace {
int64_t FileBytes(const std::string& path) {
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  return ec ? 0 : static_cast<int64_t>(size);
}
}  // namespace

int64_t Datastore::database_file_bytes() const { return FileBytes(path_); }
int64_t Datastore::log_file_bytes() const { return FileBytes(path_ + "-wal"); }

void Datastore::TEST_SetSyncPoint(std::function<void(std::string_view)> hook) {
  std::lock_guard lock(sync_mu_);
  sync_hook_ = std::move(hook);
  sync_hook_set_.store(static_cast<bool>(sync_hook_));
}

void Datastore::SyncPoint(std::string_view name) {
  if (!sync_hook_set_.load(std::memory_order_relaxed)) return;
  std::function<void(std::string_view)> hook;
  {
    std::lock_guard lock(sync_mu_);
    hook = sync_hook_;
  }
  if (hook) hook(name);
}

Status Datastore::SyncLog() {
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

Status Datastore::WaitDurable(int64_t seq) {
  if (durable_seen_.load() >= seq) return Ok();  // the common case for reads: nothing to wait for
  std::unique_lock lock(durable_mu_);
  while (durable_ < seq) {
    if (commit_done_ < seq) {
      // Commit `seq` is still being written (a reader saw it early): its writer wakes us.
      ++commit_waiters_;
      commit_cv_.wait(lock);
      --commit_waiters_;
      continue;
    }
    if (syncing_) {
      durable_cv_.wait(lock);  // the leader wakes everyone when its sync ends
      continue;
    }
    // Lead: one sync makes every commit written so far durable.
    syncing_ = true;
    int64_t target = commit_done_;
    lock.unlock();
    SyncPoint("group_commit:syncing");
    Status synced = SyncLog();
    lock.lock();
    syncing_ = false;
    if (synced) {
      durable_ = std::max(durable_, target);
      durable_seen_.store(durable_);
    }
    durable_cv_.notify_all();
    FP_CHECK_OK(synced);
  }
  return Ok();
}

Status Datastore::RunScopedWrite(const std::function<Status(Tx&)>& body,
                                 const std::function<const void*()>& result,
                                 const std::type_info& type) {
  IdempotencyScope* scope = IdempotencyScope::Current(*this);
  Status done = RunWrite([&](Tx& tx) -> Status {
    // Even without a scope: the thread leading the commit may be a keyed request's, and its
    // scope is not this write's.
    IdempotencyInWrite in_write(scope);
    FP_CHECK_OK(body(tx));
    return scope ? scope->RecordIn(tx, result ? result() : nullptr, type) : Ok();
  });
  if (scope) scope->Settle(static_cast<bool>(done));
  return done;
}

struct Datastore::QueuedWrite {
  enum class State { kQueued, kLeading, kTaken, kDone };
  const std::function<Status(Tx&)>* body;
  Status result = Ok();
  int64_t seq = 0;               // the commit number of the batch that ran it
  State state = State::kQueued;  // guarded by queue_mu_
  // Signalled, under queue_mu_, when this write is to lead a batch or is done and durable.
  // One per write: waking a writer wakes that writer and no other.
  std::condition_variable cv;
};

Status Datastore::RunWrite(const std::function<Status(Tx&)>& body) {
  using State = QueuedWrite::State;
  SyncPoint("tx:waiting_for_writer");
  QueuedWrite me{&body};
  std::vector<QueuedWrite*> batch;
  {
    std::unique_lock lock(queue_mu_);
    if (writing_) {
      queue_.push_back(&me);
      if (sync_hook_set_.load(std::memory_order_relaxed)) {
        lock.unlock();  // the hook may wait for other writers to queue
        SyncPoint("tx:queued");
        lock.lock();
      }
      me.cv.wait(lock, [&] { return me.state == State::kLeading || me.state == State::kDone; });
      // Another writer ran this write in its batch and waited until it was durable.
      if (me.state == State::kDone) return me.result;
    }
    writing_ = true;
    batch.push_back(&me);  // this write first, then every write queued behind the last batch
    for (QueuedWrite* w : queue_) {
      w->state = State::kTaken;
      batch.push_back(w);
    }
    queue_.clear();
  }
  RunWriteBatch(batch);
  if (log_frames_ >= kLogLimitFrames && std::chrono::steady_clock::now() >= limit_retry_at_) {
    LimitLog();
  } else if (restart_wanted_.load(std::memory_order_relaxed)) {
    RestartLog();
  }
  {
    // The next batch starts while this one's sync runs, so that its commit joins the next sync.
    std::lock_guard lock(queue_mu_);
    if (queue_.empty()) {
      writing_ = false;
    } else {
      QueuedWrite* next = queue_.front();
      queue_.erase(queue_.begin());
      next->state = State::kLeading;
      next->cv.notify_one();
    }
  }
  // The answers (results, or errors derived from what the writes read, possibly the effects of
  // earlier writes in the batch) leave only once the batch is durable. The writes of the batch
  // sleep until then and are woken once, here.
  Status durable = WaitDurable(me.seq != 0 ? me.seq : commit_begun_.load());
  std::lock_guard lock(queue_mu_);
  for (QueuedWrite* w : batch) {
    if (!durable) w->result = durable;
    w->state = State::kDone;
    // Under the lock: the woken writer returns and destroys its cv only after we release it.
    if (w != &me) w->cv.notify_one();
  }
  return me.result;
}

void Datastore::RestartLog() {
  // The background checkpoint copied the log up to where it stood then; this copies what was
  // appended meanwhile (little) and waits briefly for readers, with no write in between.
  Status done = writer_->CheckpointRestart(kRestartBudget);
  if (done) {
    restart_wanted_.store(false);
    restart_attempts_ = 0;
    log_restarts_.fetch_add(1);
    return;
  }
  const bool busy = writer_->last_error_was_busy();
  if (busy && ++restart_attempts_ < kRestartAttempts) return;  // again after the next batch
  restart_wanted_.store(false);
  restart_attempts_ = 0;
  if (!busy) WarnCheckpointFailed(done.error());
}

void Datastore::LimitLog() {
  // The background checkpoint fell behind the writes (a slow disk, a starved thread, large
  // commits back to back): copy everything here, with the queued writes waiting, so that the
  // next write starts the log over. This is what bounds the log. A checkpoint in progress
  // makes SQLite refuse another at once, without its busy handler: wait for it to end first.
  std::lock_guard copying(copying_mu_);
  Status done = writer_->CheckpointRestart(kLogLimitBudget);
  if (done) {
    restart_wanted_.store(false);
    restart_attempts_ = 0;
    log_frames_ = 0;
    log_restarts_.fetch_add(1);
    log_limit_restarts_.fetch_add(1);
    limit_backoff_ = std::chrono::milliseconds(2000);
    return;
  }
  // A read longer than the budget: the log grows until it ends. Tried again after a backoff, so
  // that writes do not each wait out the budget meanwhile (and the warning is not repeated per
  // batch).
  limit_retry_at_ = std::chrono::steady_clock::now() + limit_backoff_;
  limit_backoff_ = std::min(2 * limit_backoff_, std::chrono::milliseconds(30'000));
  WarnCheckpointFailed(done.error());
}

void Datastore::WarnCheckpointFailed(const Error& error) const {
  std::string why = error.message();
  std::replace(why.begin(), why.end(), '"', '\'');  // keep the line valid JSON
  std::fprintf(stderr,
               "{\"level\":\"warn\",\"msg\":\"checkpoint failed\",\"path\":\"%s\","
               "\"error\":\"%s\"}\n",
               path_.c_str(), why.c_str());
}

void Datastore::RunWriteBatch(const std::vector<QueuedWrite*>& batch) {
  using namespace std::chrono;
  SqliteConnection& conn = *writer_;
  // Another process holding the database's write lock: retry with jittered backoff.
  const auto deadline = steady_clock::now() + seconds(30);
  thread_local std::minstd_rand jitter(std::random_device{}());
  auto backoff = milliseconds(1);
  Status began = conn.ExecScript("BEGIN IMMEDIATE");
  while (!began && conn.last_error_was_busy() && steady_clock::now() < deadline) {
    std::this_thread::sleep_for(microseconds(
        jitter() % static_cast<uint64_t>(duration_cast<microseconds>(backoff).count() + 1)));
    backoff = std::min(backoff * 2, duration_cast<milliseconds>(milliseconds(200)));
    began = conn.ExecScript("BEGIN IMMEDIATE");
  }
  if (!began) {
    for (QueuedWrite* w : batch) w->result = began;
    return;
  }
  int64_t committed = 0;
  for (QueuedWrite* w : batch) {
    if (!conn.InTransaction()) {
      // SQLite ended the transaction after an error (disk full, I/O): nothing more can join.
      w->result = Fail(Error::Internal("the write transaction was aborted by an earlier error"));
      continue;
    }
    Status s = conn.ExecScript("SAVEPOINT write");
    if (s) {
      Tx tx(conn, clock_->Now());
      try {
        s = (*w->body)(tx);
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
    w->result = s;
    if (s) ++committed;
  }
  // Numbered before COMMIT: a reader that sees this commit also sees its number.
  const int64_t seq = commit_begun_.fetch_add(1) + 1;
  Status commit = conn.InTransaction()
                      ? conn.ExecScript("COMMIT")
                      // SQLite (or a failed undo) ended the transaction: writes reported
                      // as done so far were rolled back with it.
                      : Status(Fail(Error::Internal(
                            "the write transaction was rolled back by an error in its batch")));
  if (!commit) {
    if (conn.InTransaction()) (void)conn.ExecScript("ROLLBACK");
    // Nothing of the batch is kept, and a failed write may have read what others wrote.
    for (QueuedWrite* w : batch) w->result = commit;
    committed = 0;
  }
  for (QueuedWrite* w : batch) w->seq = seq;
  durable_commits_.fetch_add(committed);
  sqlite_commits_.fetch_add(1);
  bool waiters = false;
  {
    std::lock_guard lock(durable_mu_);
    commit_done_ = seq;  // written to the log (or failed): a sync may now cover it
    waiters = commit_waiters_ > 0;
  }
  // Only readers that saw this commit before it was published wait for it (rarely): waking
  // every thread waiting for a sync at each commit would cost a context switch per waiter.
  if (waiters) commit_cv_.notify_all();
}

Status Datastore::RunTransaction(bool write, const std::function<Status(Tx&)>& body,
                                 bool wait_durable) {
  if (write) return RunScopedWrite(body, nullptr, typeid(void));
  using namespace std::chrono;
  const auto deadline = steady_clock::now() + seconds(30);
  thread_local std::minstd_rand jitter(std::random_device{}());
  auto backoff = milliseconds(1);
  for (;;) {
    auto conn = FP_TRY(Acquire());
    Status result = conn->ExecScript("BEGIN");
    bool began = static_cast<bool>(result);
    if (began) {
      Tx tx(*conn, clock_->Now());
      result = body(tx);
      if (result) result = conn->ExecScript("COMMIT");
    }
    bool busy = !result && conn->last_error_was_busy();
    if (!result && began) (void)conn->ExecScript("ROLLBACK");
    Release(std::move(conn));
    if (!result && busy && steady_clock::now() < deadline) {
      // Full jitter: sleep uniformly in [0, backoff), then double up to a cap.
      auto sleep = microseconds(
          jitter() % static_cast<uint64_t>(duration_cast<microseconds>(backoff).count() + 1));
      std::this_thread::sleep_for(sleep);
      backoff = std::min(backoff * 2, duration_cast<milliseconds>(milliseconds(200)));
      continue;
    }
    // What this read saw leaves only once durable (see WaitDurable), now or at the end of the
    // caller's DeferredDurability scope.
    if (wait_durable) {
      if (deferred_durability != nullptr && &deferred_durability->ds_ == this) {
        deferred_durability->seen_ = std::max(deferred_durability->seen_, commit_begun_.load());
      } else {
        FP_CHECK_OK(WaitDurable(commit_begun_.load()));
      }
    }
    return result;
  }
}

}  // namespace fp::db

namespace fp::db {

std::string PageClause(const PageRequest& page, std::string_view name_column,
                       std::string_view id_column, std::vector<SqlValue>& params) {
  std::string_view key = page.order == SortOrder::kIdAscending ? id_column : name_column;
  bool descending = page.order == SortOrder::kNameDescending;
  std::string sql;
  if (page.after) {
    sql += fmt::format(" AND {} {} ?", key, descending ? "<" : ">");
    params.emplace_back(*page.after);
  }
  sql += fmt::format(" ORDER BY {} {} LIMIT ?", key, descending ? "DESC" : "ASC");
  params.emplace_back(page.limit);
  return sql;
}

}  // namespace fp::db
