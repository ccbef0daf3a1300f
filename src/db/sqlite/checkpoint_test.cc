// The write-ahead log reaches the database file once it has grown past the datastore's
// checkpoint threshold, with no explicit checkpoint by the caller, and the background
// checkpointer counts the checkpoint it ran. The log starts over after checkpoints even while
// writes never pause. The checkpointer never takes a process signal.

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/testing/wait_for.h"
#include "db/sqlite/checkpointer.h"
#include "db/testing/temp_datastore.h"

namespace fp::db {
namespace {

using TempDatastore = testing::TempSqliteDatastore;

void CreateFiller(Datastore& ds) {
  ASSERT_TRUE(ds.Write<bool>([](Tx& tx) -> Result<bool> {
    FP_TRY(tx.Exec("CREATE TABLE filler (id INTEGER PRIMARY KEY, data BLOB NOT NULL)"));
    return true;
  }));
}

// One commit of about `pages` pages of 4 KiB.
void WriteFillerPages(Datastore& ds, int pages) {
  auto wrote = ds.Write<bool>([pages](Tx& tx) -> Result<bool> {
    for (int r = 0; r < pages; ++r)
      FP_TRY(tx.Exec("INSERT INTO filler (data) VALUES (zeroblob(4000))"));
    return true;
  });
  ASSERT_TRUE(wrote) << wrote.error().message();
}

TEST(CheckpointTest, TheLogReachesTheDatabaseFileInTheBackground) {
  TempDatastore ds;
  const std::string db_file = ds.dir() + "/floatplane.db";
  const auto size_before = std::filesystem::file_size(db_file);
  ASSERT_NO_FATAL_FAILURE(CreateFiller(*ds));
  // About 12,000 pages of 4 KiB in 60 commits: past the threshold of 4,000 frames.
  for (int i = 0; i < 60; ++i) {
    ASSERT_NO_FATAL_FAILURE(WriteFillerPages(*ds, 200));
  }
  ASSERT_TRUE(
      fp::testing::WaitFor([&] { return ds->checkpoints() > 0; }, std::chrono::seconds(20)));
  // The pages are in the database file now, not only in the log.
  EXPECT_GT(std::filesystem::file_size(db_file), size_before + (20u << 20));
}

// The size of a write-ahead log file holding `frames` frames: a 32-byte header, then frames of
// a 24-byte header and a 4 KiB page.
constexpr uintmax_t LogBytes(int frames) { return 32 + uintmax_t(frames) * (24 + 4096); }
// The pages of one WriteFillerPages(200) commit, with the B-tree pages above them.
constexpr int kFramesPerCommit = 210;
constexpr int kCommits = 100;  // about 20,000 frames: two and a half times the log's limit

// Under writes that never pause, with readers coming and going, the log still starts over
// after each checkpoint instead of growing for as long as the writes last (each commit then
// wrote into newly allocated blocks, and the file grew by gigabytes an hour). Its size stays
// within the limit whatever the timing: the background checkpoints usually restart it well
// before, and the write lane restarts it at the limit when they fall behind.
TEST(CheckpointTest, TheLogStartsOverWhileWritesAndReadsContinue) {
  TempDatastore ds;
  const std::string wal_file = ds.dir() + "/floatplane.db-wal";
  ASSERT_NO_FATAL_FAILURE(CreateFiller(*ds));
  std::atomic<bool> stop{false};
  std::atomic<int64_t> reads{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        auto got = ds->Read<bool>([](Tx& tx) -> Result<bool> {
          FP_TRY(tx.QueryRow("SELECT max(id) FROM filler"));
          return true;
        });
        if (got) reads.fetch_add(1);
      }
    });
  }
  uintmax_t largest_log = 0;
  for (int i = 0; i < kCommits; ++i) {
    ASSERT_NO_FATAL_FAILURE(WriteFillerPages(*ds, 200));
    largest_log = std::max(largest_log, std::filesystem::file_size(wal_file));
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_GT(reads.load(), 0);
  // 20,000 frames cannot have fit in a log of at most 8,210 frames without two restarts. Not
  // all of them are the checkpointer's (log_restarts()): after a checkpoint that copied the
  // whole log, SQLite's next writer starts the log over by itself when no reader is on it, so
  // how many are counted depends on the readers' timing (1 under a loaded CI machine). The
  // size bound is what proves the log started over.
  EXPECT_LE(largest_log, LogBytes(sqlite::Checkpointer::kLogLimitFrames + kFramesPerCommit))
      << "the log outgrew its limit";
}

// A checkpointer that cannot keep up (here: held before it copies anything, as a starved
// thread or a slow disk would hold it) does not let the log grow past its limit: the write
// lane restarts it there itself, with writes waiting meanwhile.
TEST(CheckpointTest, TheLogStaysWithinItsLimitWhenCheckpointsFallBehind) {
  // Declared before the datastore, so that they outlive its checkpointer: released, it may
  // still be inside the sync point when the test's body ends.
  Mutex mu;
  std::condition_variable cv;
  bool held = false, released = false;
  TempDatastore ds;
  const std::string wal_file = ds.dir() + "/floatplane.db-wal";
  ASSERT_NO_FATAL_FAILURE(CreateFiller(*ds));
  ds->TEST_SetSyncPoint([&](std::string_view name) {
    if (name != "checkpoint:copying") return;
    MutexLock lock(mu);
    held = true;
    cv.notify_all();
    lock.Wait(cv, [&] { return released; });
  });
  auto release = [&] {
    MutexLock lock(mu);
    released = true;
    cv.notify_all();
  };
  uintmax_t largest_log = 0;
  for (int i = 0; i < kCommits; ++i) {
    WriteFillerPages(*ds, 200);
    largest_log = std::max(largest_log, std::filesystem::file_size(wal_file));
  }
  bool checkpointer_was_held = false;
  {
    // Asked to run by the first commits over its threshold, it may not have been scheduled yet
    // on a loaded machine.
    MutexLock lock(mu);
    checkpointer_was_held =
        MachineClock().WaitFor(lock, cv, std::chrono::seconds(10), [&] { return held; });
  }
  const int64_t checkpoints = ds->checkpoints();
  release();
  EXPECT_TRUE(checkpointer_was_held) << "the background checkpointer never ran: this test "
                                        "checks nothing";
  EXPECT_EQ(checkpoints, 0);
  EXPECT_GE(ds->log_limit_restarts(), 2);
  EXPECT_LE(largest_log, LogBytes(sqlite::Checkpointer::kLogLimitFrames + kFramesPerCommit))
      << "the log outgrew its limit";
}

std::set<std::string> ThreadsOfThisProcess() {
  std::set<std::string> tids;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task"))
    tids.insert(entry.path().filename().string());
  return tids;
}

// The "SigBlk:" mask of one of this process's threads, from /proc.
unsigned long long BlockedSignals(const std::string& tid) {
  std::ifstream status("/proc/self/task/" + tid + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("SigBlk:", 0) == 0) return std::stoull(line.substr(7), nullptr, 16);
  }
  ADD_FAILURE() << "no SigBlk line for thread " << tid;
  return 0;
}

// A program that waits for SIGTERM with sigwait blocks it in its threads; a thread the
// datastore started with SIGTERM unblocked would take the signal and the process would die
// of it instead of stopping cleanly.
// A read that outlasts the lane's budget pins the log above its limit; writes must not each
// wait out that budget meanwhile (before the backoff, 20 small writes took 20 s here).
TEST(CheckpointTest, AReadPinningTheLogAboveItsLimitDoesNotStallEveryWrite) {
  TempDatastore ds;
  ASSERT_NO_FATAL_FAILURE(CreateFiller(*ds));
  Mutex mu;
  std::condition_variable cv;
  bool reading = false, release = false;
  std::thread reader([&] {
    (void)ds->Read<bool>([&](Tx& tx) -> Result<bool> {
      FP_TRY(tx.QueryRow("SELECT max(id) FROM filler"));
      MutexLock lock(mu);
      reading = true;
      cv.notify_all();
      MachineClock().WaitFor(lock, cv, std::chrono::seconds(30), [&] { return release; });
      return true;
    });
  });
  {
    MutexLock lock(mu);
    lock.Wait(cv, [&] { return reading; });
  }
  // Past the limit while the read holds the log.
  for (int i = 0; i * kFramesPerCommit <= sqlite::Checkpointer::kLogLimitFrames + kFramesPerCommit;
       ++i) {
    ASSERT_NO_FATAL_FAILURE(WriteFillerPages(*ds, 200));
  }
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) ASSERT_NO_FATAL_FAILURE(WriteFillerPages(*ds, 1));
  auto took = std::chrono::steady_clock::now() - start;
  {
    MutexLock lock(mu);
    release = true;
    cv.notify_all();
  }
  reader.join();
  EXPECT_LT(took, std::chrono::seconds(5));
  EXPECT_EQ(ds->log_limit_restarts(), 0);  // the read did pin the log throughout
}

TEST(CheckpointTest, TheCheckpointerThreadBlocksProcessSignals) {
  sigset_t none, before;
  sigemptyset(&none);
  pthread_sigmask(SIG_SETMASK, &none, &before);  // open the datastore with nothing blocked
  const auto threads_before = ThreadsOfThisProcess();
  TempDatastore ds;
  const auto threads_after = ThreadsOfThisProcess();
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  int started = 0;
  for (const auto& tid : threads_after) {
    if (threads_before.count(tid)) continue;
    ++started;
    const unsigned long long blocked = BlockedSignals(tid);
    EXPECT_TRUE(blocked & (1ull << (SIGTERM - 1))) << "thread " << tid << " takes SIGTERM";
    EXPECT_TRUE(blocked & (1ull << (SIGINT - 1))) << "thread " << tid << " takes SIGINT";
  }
  EXPECT_GE(started, 1) << "the datastore started no thread; this test checks nothing";
}

}  // namespace
}  // namespace fp::db
