// The write-ahead log reaches the database file once it has grown past the datastore's
// checkpoint threshold, with no explicit checkpoint by the caller, and the background
// checkpointer counts the checkpoint it ran.

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
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

}  // namespace
}  // namespace fp::db
