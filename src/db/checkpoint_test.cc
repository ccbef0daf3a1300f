// The write-ahead log reaches the database file once it has grown past the datastore's
// checkpoint threshold, with no explicit checkpoint by the caller, and the background
// checkpointer counts the checkpoint it ran. The checkpointer never takes a process signal.

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "db/testing/temp_datastore.h"

namespace fp::db {
namespace {

using testing::TempDatastore;

TEST(CheckpointTest, TheLogReachesTheDatabaseFileInTheBackground) {
  TempDatastore ds;
  const std::string db_file = ds.dir() + "/floatplane.db";
  const auto size_before = std::filesystem::file_size(db_file);
  ASSERT_TRUE(ds->Write<bool>([](Tx& tx) -> Result<bool> {
    FP_TRY(tx.Exec("CREATE TABLE filler (id INTEGER PRIMARY KEY, data BLOB NOT NULL)"));
    return true;
  }));
  // About 12,000 pages of 4 KiB in 60 commits: past the threshold of 10,000 frames.
  for (int i = 0; i < 60; ++i) {
    auto wrote = ds->Write<bool>([](Tx& tx) -> Result<bool> {
      for (int r = 0; r < 200; ++r)
        FP_TRY(tx.Exec("INSERT INTO filler (data) VALUES (zeroblob(4000))"));
      return true;
    });
    ASSERT_TRUE(wrote) << wrote.error().message();
  }
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
       ds->checkpoints() == 0 && std::chrono::steady_clock::now() < deadline;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GT(ds->checkpoints(), 0);
  // The pages are in the database file now, not only in the log.
  EXPECT_GT(std::filesystem::file_size(db_file), size_before + (20u << 20));
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
