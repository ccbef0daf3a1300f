#pragma once

// The SQLite engine's checkpoints: how its write-ahead log is copied into the database file
// and kept bounded.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <string>
#include <thread>

#include "common/error.h"
#include "common/mutex.h"
#include "db/engine.h"
#include "db/sqlite/connection.h"

namespace fp::db::sqlite {

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
class Checkpointer {
 public:
  // The write-ahead log is checkpointed in the background every kCheckpointFrames frames (a
  // frame is a page of 4 KiB and a 24-byte header) and starts over after each checkpoint. Should
  // it reach kLogLimitFrames all the same, the write lane checkpoints it before the next batch,
  // so it never holds more than kLogLimitFrames plus one batch's pages unless a read lasts
  // longer than a second (see LimitLog; after such a failure the lane tries again after a
  // backoff of 2 s, doubling up to 30 s).
  static constexpr int kCheckpointFrames = 4000;
  static constexpr int kLogLimitFrames = 2 * kCheckpointFrames;

  // Opens the checkpointer's connection to the database at `path`, replaces the automatic
  // checkpoint of `writer` (the write lane's connection) by its own requests, and starts the
  // thread. `writer`, `sync_points` and `clock` must outlive the checkpointer. Errors: opening
  // failed.
  static Result<std::unique_ptr<Checkpointer>> Start(const std::string& path,
                                                     SqliteConnection& writer,
                                                     SyncPoints& sync_points, const Clock& clock);
  // Stops the thread and waits for it (a checkpoint in progress finishes).
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Write lane only, between two batches (no transaction open on the writer): starts the log
  // over after a background checkpoint, or copies it all if it reached kLogLimitFrames.
  void AfterBatch();

  int64_t checkpoints() const { return checkpoints_.load(); }
  // Times the log was emptied so that the next write starts it over from its beginning.
  int64_t log_restarts() const { return log_restarts_.load(); }
  // Of those, the times the log had reached kLogLimitFrames and writes waited for the restart.
  int64_t log_limit_restarts() const { return log_limit_restarts_.load(); }

 private:
  Checkpointer(std::string path, SqliteConnection& writer, SyncPoints& sync_points,
               const Clock& clock)
      : path_(std::move(path)), writer_(writer), sync_points_(sync_points), clock_(clock) {}
  // The writer's WAL hook: `frames` in the log after a commit (write lane).
  void Committed(int frames);
  void Loop();
  void RestartLog();  // write lane only
  void LimitLog();    // write lane only: the log reached kLogLimitFrames
  // A line on stderr (the engine has no logger of its own); the log keeps growing until the
  // next checkpoint succeeds, and nothing written is lost.
  void WarnCheckpointFailed(const Error& error) const;

  std::string path_;
  SqliteConnection& writer_;  // the write lane's; used only from the write lane
  SyncPoints& sync_points_;
  const Clock& clock_;
  std::atomic<bool> restart_wanted_{false};  // set by the checkpointer, cleared by the lane
  int restart_attempts_ = 0;                 // write lane only
  // After LimitLog failed (a read longer than its budget pins the log), the next attempt waits
  // this long, doubling up to 30 s: otherwise every batch would wait the whole budget for as
  // long as the read lasts. Write lane only.
  MonoTime limit_retry_at_{};
  std::chrono::milliseconds limit_backoff_{2000};
  std::atomic<int64_t> log_restarts_{0};
  std::atomic<int64_t> log_limit_restarts_{0};
  int log_frames_ = 0;  // write lane only: frames in the log after the last commit
  Mutex copying_mu_;    // held by the checkpointer while it copies, and by LimitLog
  std::unique_ptr<SqliteConnection> conn_;  // used only by thread_
  Mutex mu_;
  std::condition_variable cv_;
  bool wanted_ FP_GUARDED_BY(mu_) = false;
  bool stop_ FP_GUARDED_BY(mu_) = false;
  int frames_at_request_ = 0;  // write lane only: the log's size when last requested
  std::atomic<int64_t> checkpoints_{0};
  std::thread thread_;
};

}  // namespace fp::db::sqlite
