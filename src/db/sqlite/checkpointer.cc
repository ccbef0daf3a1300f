#include "db/sqlite/checkpointer.h"

#include <signal.h>

#include <algorithm>
#include <cstdio>

#include "common/thread_name.h"

namespace fp::db::sqlite {

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

Result<std::unique_ptr<Checkpointer>> Checkpointer::Start(const std::string& path,
                                                          SqliteConnection& writer,
                                                          SyncPoints& sync_points,
                                                          const Clock& clock) {
  std::unique_ptr<Checkpointer> c(new Checkpointer(path, writer, sync_points, clock));
  c->conn_ = FP_TRY(SqliteConnection::Open(path));
  Checkpointer* self = c.get();
  writer.SetWalHook([self](int frames) { self->Committed(frames); });
  // A library's background thread: process signals (SIGTERM, SIGINT) belong to the threads the
  // program chose, never to this one. It inherits the mask in force when it starts.
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &before);
  c->thread_ = std::thread([self] {
    NameThisThread("checkpointer");
    self->Loop();
  });
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  return c;
}

Checkpointer::~Checkpointer() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Checkpointer::Committed(int frames) {
  log_frames_ = frames;
  // Once per kCheckpointFrames of growth (the log starts over after a complete checkpoint),
  // not at every commit while a reader keeps the log from starting over.
  if (frames < frames_at_request_) frames_at_request_ = 0;
  if (frames - frames_at_request_ < kCheckpointFrames) return;
  frames_at_request_ = frames;
  {
    MutexLock lock(mu_);
    wanted_ = true;
  }
  cv_.notify_one();
}

void Checkpointer::Loop() {
  MutexLock lock(mu_);
  for (;;) {
    lock.Wait(cv_, [&]() FP_REQUIRES(mu_) { return wanted_ || stop_; });
    if (stop_) return;
    wanted_ = false;
    lock.Unlock();
    sync_points_.Pass("checkpoint:copying");
    // PASSIVE: copies what no reader still needs; the next request copies the rest. Once all
    // is copied, the next write starts the log over from its beginning.
    Status done = Ok();
    {
      MutexLock copying(copying_mu_);
      done = conn_->CheckpointPassive();
    }
    if (done) {
      checkpoints_.fetch_add(1);
      restart_wanted_.store(true);
    } else if (!conn_->last_error_was_busy()) {
      WarnCheckpointFailed(done.error());
    }
    lock.Lock();
  }
}

void Checkpointer::AfterBatch() {
  if (log_frames_ >= kLogLimitFrames && clock_.Monotonic() >= limit_retry_at_) {
    LimitLog();
  } else if (restart_wanted_.load(std::memory_order_relaxed)) {
    RestartLog();
  }
}

void Checkpointer::RestartLog() {
  // The background checkpoint copied the log up to where it stood then; this copies what was
  // appended meanwhile (little) and waits briefly for readers, with no write in between.
  Status done = writer_.CheckpointRestart(kRestartBudget, clock_);
  if (done) {
    restart_wanted_.store(false);
    restart_attempts_ = 0;
    log_restarts_.fetch_add(1);
    return;
  }
  const bool busy = writer_.last_error_was_busy();
  if (busy && ++restart_attempts_ < kRestartAttempts) return;  // again after the next batch
  restart_wanted_.store(false);
  restart_attempts_ = 0;
  if (!busy) WarnCheckpointFailed(done.error());
}

void Checkpointer::LimitLog() {
  // The background checkpoint fell behind the writes (a slow disk, a starved thread, large
  // commits back to back): copy everything here, with the queued writes waiting, so that the
  // next write starts the log over. This is what bounds the log. A checkpoint in progress
  // makes SQLite refuse another at once, without its busy handler: wait for it to end first.
  MutexLock copying(copying_mu_);
  Status done = writer_.CheckpointRestart(kLogLimitBudget, clock_);
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
  limit_retry_at_ = clock_.Deadline(limit_backoff_);
  limit_backoff_ = std::min(2 * limit_backoff_, std::chrono::milliseconds(30'000));
  WarnCheckpointFailed(done.error());
}

void Checkpointer::WarnCheckpointFailed(const Error& error) const {
  std::string why = error.message();
  std::replace(why.begin(), why.end(), '"', '\'');  // keep the line valid JSON
  std::fprintf(stderr,
               "{\"level\":\"warn\",\"msg\":\"checkpoint failed\",\"path\":\"%s\","
               "\"error\":\"%s\"}\n",
               path_.c_str(), why.c_str());
}

}  // namespace fp::db::sqlite
