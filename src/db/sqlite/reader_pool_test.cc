// Read connections are bounded: under more concurrent reads than kMaxReaders, reads wait for a
// connection instead of opening one each (each holds file descriptors), and a read made inside
// a read never waits, so it cannot deadlock when the pool is exhausted.

#include "db/sqlite/reader_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/testing/wait_for.h"
#include "db/testing/temp_datastore.h"

namespace fp::db {
namespace {

using TempDatastore = testing::TempSqliteDatastore;

// Lets `n` threads in, then holds them until all are inside (or Open() is called).
class Gate {
 public:
  void Arrive() {
    MutexLock lock(mu_);
    ++inside_;
    cv_.notify_all();
    lock.Wait(cv_, [&]() FP_REQUIRES(mu_) { return open_; });
  }
  bool WaitInside(int n) {
    MutexLock lock(mu_);
    return MachineClock().WaitFor(lock, cv_, std::chrono::seconds(10),
                                  [&]() FP_REQUIRES(mu_) { return inside_ >= n; });
  }
  int inside() {
    MutexLock lock(mu_);
    return inside_;
  }
  void Open() {
    MutexLock lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  Mutex mu_;
  std::condition_variable cv_;
  int inside_ FP_GUARDED_BY(mu_) = 0;
  bool open_ FP_GUARDED_BY(mu_) = false;
};

TEST(ReaderPoolTest, ReadsBeyondTheBoundWaitForAConnection) {
  TempDatastore ds;
  Gate gate;
  const int n = sqlite::ReaderPool::kMaxReaders + 8;
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&] {
      auto r = ds->Read<bool>([&](Tx&) -> Result<bool> {
        gate.Arrive();
        return true;
      });
      EXPECT_TRUE(r);
      ++done;
    });
  }
  ASSERT_TRUE(gate.WaitInside(sqlite::ReaderPool::kMaxReaders));
  // The other 8 wait for a connection.
  EXPECT_TRUE(fp::testing::WaitFor([&] { return ds->waiting_readers() == 8; }));
  EXPECT_EQ(gate.inside(), sqlite::ReaderPool::kMaxReaders);
  EXPECT_EQ(ds->open_readers(), sqlite::ReaderPool::kMaxReaders);
  gate.Open();
  for (auto& t : threads) t.join();
  EXPECT_EQ(done.load(), n);
  EXPECT_EQ(ds->open_readers(), sqlite::ReaderPool::kMaxReaders);
}

TEST(ReaderPoolTest, AReadInsideAReadDoesNotWaitForTheExhaustedPool) {
  TempDatastore ds;
  Gate gate;
  std::atomic<int> nested{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < sqlite::ReaderPool::kMaxReaders; ++i) {
    threads.emplace_back([&] {
      auto r = ds->Read<bool>([&](Tx&) -> Result<bool> {
        gate.Arrive();  // every connection is in use once all have arrived
        auto inner = ds->Read<bool>([](Tx&) -> Result<bool> { return true; });
        if (inner) ++nested;
        return true;
      });
      EXPECT_TRUE(r);
    });
  }
  ASSERT_TRUE(gate.WaitInside(sqlite::ReaderPool::kMaxReaders));
  gate.Open();
  for (auto& t : threads) t.join();
  EXPECT_EQ(nested.load(), sqlite::ReaderPool::kMaxReaders);
}

}  // namespace
}  // namespace fp::db

namespace fp::db {
namespace {

// A read connection's page cache is bounded at kReaderCacheKib (issue 26: 18 idle readers at
// SQLite's default 2,000 KiB held most of a rack-scale server's memory); the writer keeps
// SQLite's default.
TEST(ReaderPoolTest, AReadConnectionsPageCacheIsBounded) {
  testing::TempSqliteDatastore ds;
  auto body = [](Tx& tx) -> Result<int64_t> {
    return FP_TRY(tx.QueryRow("PRAGMA cache_size"))->Int(0);
  };
  EXPECT_EQ(ds->Read<int64_t>(body).value(), -sqlite::ReaderPool::kReaderCacheKib);
  EXPECT_EQ(ds->Write<int64_t>(body).value(), -2000);
}

}  // namespace
}  // namespace fp::db
