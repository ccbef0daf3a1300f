// Group commit: a write is acknowledged only after a sync of the write-ahead log that covers
// it, concurrent writes share syncs, and a reader never answers with a commit that is not yet
// durable. The syncing leader is held at the "group_commit:syncing" sync point so that the
// interleavings are forced, not hoped for.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <stdexcept>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/testing/wait_for.h"
#include "db/testing/temp_datastore.h"

namespace fp::db {
namespace {

using fp::testing::WaitFor;
using TempDatastore = testing::TempSqliteDatastore;

// Holds the first thread that reaches "group_commit:syncing" until Release().
class HeldSync {
 public:
  explicit HeldSync(Datastore& ds) : ds_(ds) {
    ds_.TEST_SetSyncPoint([this](std::string_view name) {
      if (name != "group_commit:syncing") return;
      MutexLock lock(mu_);
      if (used_) return;
      used_ = true;
      held_ = true;
      cv_.notify_all();
      lock.Wait(cv_, [&]() FP_REQUIRES(mu_) { return released_; });
    });
  }
  ~HeldSync() {
    Release();
    ds_.TEST_SetSyncPoint(nullptr);
  }
  void WaitUntilHeld() {
    MutexLock lock(mu_);
    lock.Wait(cv_, [&]() FP_REQUIRES(mu_) { return held_; });
  }
  void Release() {
    MutexLock lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  Datastore& ds_;
  Mutex mu_;
  std::condition_variable cv_;
  bool used_ FP_GUARDED_BY(mu_) = false;
  bool held_ FP_GUARDED_BY(mu_) = false;
  bool released_ FP_GUARDED_BY(mu_) = false;
};

Status Insert(Datastore& ds, int64_t v) {
  return ds
      .Write<bool>([&](Tx& tx) -> Result<bool> {
        FP_TRY(tx.Exec("INSERT INTO group_commit_probe (v) VALUES (?)", v));
        return true;
      })
      .map([](bool) {});
}

int64_t Count(Reader ds) {
  return ds
      .Read<int64_t>([&](Tx& tx) -> Result<int64_t> {
        auto row = FP_TRY(tx.QueryRow("SELECT count(*) FROM group_commit_probe"));
        return row->Int(0);
      })
      .value();
}

class GroupCommitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(ds_->Write<bool>([](Tx& tx) -> Result<bool> {
      FP_TRY(tx.Exec("CREATE TABLE group_commit_probe (v INTEGER NOT NULL)"));
      return true;
    }));
  }
  TempDatastore ds_;
};

TEST_F(GroupCommitTest, WritersWaitForTheSyncAndShareTheNextOne) {
  constexpr int kFollowers = 4;
  int64_t commits_before = ds_->durable_commits();
  int64_t syncs_before = ds_->log_syncs();
  std::atomic<int> acknowledged{0};
  HeldSync held(*ds_);
  std::thread leader([&] {
    EXPECT_TRUE(Insert(*ds_, 0));
    ++acknowledged;
  });
  held.WaitUntilHeld();
  std::vector<std::thread> followers;
  for (int i = 1; i <= kFollowers; ++i) {
    followers.emplace_back([&, i] {
      EXPECT_TRUE(Insert(*ds_, i));
      ++acknowledged;
    });
  }
  // Every follower commits (the writer lock is free: the leader syncs outside it) and waits for
  // the sync that is held: a batch's leader in the sync wait, the writes it ran in the queue's ...
  EXPECT_TRUE(WaitFor([&] {
    return ds_->durable_commits() >= commits_before + 1 + kFollowers &&
           ds_->sync_waiters() + ds_->queued_writes() == kFollowers;
  }));
  // ... so none is acknowledged.
  EXPECT_EQ(acknowledged.load(), 0);
  held.Release();
  leader.join();
  for (auto& t : followers) t.join();
  EXPECT_EQ(acknowledged.load(), 1 + kFollowers);
  // The leader's sync, then one sync for the four commits written while it ran.
  EXPECT_EQ(ds_->log_syncs() - syncs_before, 2);
  EXPECT_EQ(Count(*ds_), 1 + kFollowers);
}

TEST_F(GroupCommitTest, ReaderDoesNotAnswerWithACommitNotYetDurable) {
  // A scope defers only the reads given it: this one does not let the reader below skip its
  // wait.
  DeferredDurability elsewhere(*ds_);
  HeldSync held(*ds_);
  std::thread writer([&] { EXPECT_TRUE(Insert(*ds_, 1)); });
  held.WaitUntilHeld();  // committed, visible, not yet synced
  std::atomic<int64_t> seen{-1};
  std::thread reader([&] { seen = Count(*ds_); });
  EXPECT_TRUE(WaitFor([&] { return ds_->sync_waiters() == 1; })) << "the reader did not wait";
  EXPECT_EQ(seen.load(), -1) << "the reader answered before the commit it saw was durable";
  held.Release();
  writer.join();
  reader.join();
  EXPECT_EQ(seen.load(), 1);
}

// An error is an answer too: a read refusing because of what it saw (a name taken by a commit
// not yet durable) waits for that commit's sync like a read that succeeds.
TEST_F(GroupCommitTest, AReaderRefusingOnACommitNotYetDurableWaitsForItsSync) {
  HeldSync held(*ds_);
  std::thread writer([&] { EXPECT_TRUE(Insert(*ds_, 1)); });
  held.WaitUntilHeld();  // committed, visible, not yet synced
  std::atomic<bool> refused{false};
  std::thread reader([&] {
    auto taken = ds_->Read<bool>([&](Tx& tx) -> Result<bool> {
      auto row = FP_TRY(tx.QueryRow("SELECT count(*) FROM group_commit_probe"));
      if (row->Int(0) > 0) return Fail(Error::AlreadyExists("probe", "1"));
      return true;
    });
    EXPECT_FALSE(taken);
    refused = true;
  });
  EXPECT_TRUE(WaitFor([&] { return ds_->sync_waiters() == 1; })) << "the refusal did not wait";
  EXPECT_FALSE(refused.load()) << "the refusal left before the commit it saw was durable";
  held.Release();
  writer.join();
  reader.join();
  EXPECT_TRUE(refused.load());
}

// A request's checks read without waiting for the sync; the request's answer (the scope's end)
// still waits for every commit they could have seen.
TEST_F(GroupCommitTest, DeferredReadsReturnAtOnceAndTheScopeEndWaitsForTheirSync) {
  HeldSync held(*ds_);
  std::thread writer([&] { EXPECT_TRUE(Insert(*ds_, 1)); });
  held.WaitUntilHeld();  // committed, visible, not yet synced
  std::atomic<int64_t> seen{-1};
  std::atomic<bool> scope_ended{false};
  std::thread request([&] {
    {
      DeferredDurability checks(*ds_);
      seen = Count({*ds_, &checks});
    }
    scope_ended = true;
  });
  EXPECT_TRUE(WaitFor([&] { return seen.load() != -1; }, std::chrono::seconds(10)));
  EXPECT_EQ(seen.load(), 1) << "the deferred read waited for the sync";
  EXPECT_TRUE(WaitFor([&] { return ds_->sync_waiters() == 1; })) << "the scope did not wait";
  EXPECT_FALSE(scope_ended.load()) << "the scope ended before what it read was durable";
  held.Release();
  writer.join();
  request.join();
  EXPECT_TRUE(scope_ended.load());
}

TEST_F(GroupCommitTest, QuietDatastoreSyncsOncePerWrite) {
  int64_t syncs_before = ds_->log_syncs();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Insert(*ds_, i));
  EXPECT_EQ(ds_->log_syncs() - syncs_before, 3);
  // Reads of durable data do not sync.
  EXPECT_EQ(Count(*ds_), 3);
  EXPECT_EQ(ds_->log_syncs() - syncs_before, 3);
}

TEST_F(GroupCommitTest, ARefusedWriteCostsNoSync) {
  ASSERT_TRUE(Insert(*ds_, 1));
  int64_t syncs_before = ds_->log_syncs();
  int64_t sqlite_before = ds_->sqlite_commits();
  for (int i = 0; i < 3; ++i) {
    auto refused = ds_->Write<bool>([&](Tx& tx) -> Result<bool> {
      FP_TRY(tx.Exec("INSERT INTO group_commit_probe (v) VALUES (2)"));
      return Fail(Error::InvalidRequest("refused"));
    });
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().message(), "refused");
  }
  EXPECT_EQ(ds_->log_syncs(), syncs_before);
  EXPECT_EQ(ds_->sqlite_commits(), sqlite_before);
  EXPECT_EQ(Count(*ds_), 1);
  // Writing goes on, each write synced.
  ASSERT_TRUE(Insert(*ds_, 3));
  EXPECT_EQ(ds_->log_syncs(), syncs_before + 1);
  EXPECT_EQ(Count(*ds_), 2);
}

// A refusal decided on a commit whose sync is still running waits for that sync: it costs
// none of its own, but its answer may not leave before what it read is durable.
TEST_F(GroupCommitTest, ARefusalOnACommitNotYetDurableWaitsForItsSync) {
  HeldSync held(*ds_);
  std::thread writer([&] { EXPECT_TRUE(Insert(*ds_, 7)); });
  held.WaitUntilHeld();
  std::atomic<bool> answered{false};
  std::thread refuser([&] {
    auto r = ds_->Write<bool>([&](Tx& tx) -> Result<bool> {
      auto row = FP_TRY(tx.QueryRow("SELECT count(*) FROM group_commit_probe WHERE v = 7"));
      if (row->Int(0) == 1) return Fail(Error::AlreadyExists("probe", "7"));
      return true;
    });
    EXPECT_FALSE(r);
    answered = true;
  });
  EXPECT_TRUE(WaitFor([&] { return ds_->sync_waiters() == 1; })) << "the refusal did not wait";
  EXPECT_FALSE(answered.load()) << "the refusal left before the commit it saw was durable";
  int64_t syncs_before = ds_->log_syncs();
  held.Release();
  writer.join();
  refuser.join();
  EXPECT_TRUE(answered.load());
  EXPECT_EQ(ds_->log_syncs(), syncs_before + 1);  // the writer's sync, and no other
}

TEST_F(GroupCommitTest, QueuedWritesShareOneSqliteTransactionAndFailAlone) {
  // The first writer is held inside its transaction until four more writers queue behind it;
  // those four then run as one batch, where the failing one is undone alone.
  Mutex mu;
  std::condition_variable cv;
  bool in_body = false;
  bool release = false;
  int queued = 0;
  ds_->TEST_SetSyncPoint([&](std::string_view name) {
    if (name != "tx:queued") return;  // passed once the write is in the queue
    MutexLock lock(mu);
    ++queued;
    cv.notify_all();
  });
  int64_t sqlite_before = ds_->sqlite_commits();
  int64_t commits_before = ds_->durable_commits();
  std::thread first([&] {
    EXPECT_TRUE(ds_->Write<bool>([&](Tx& tx) -> Result<bool> {
      FP_TRY(tx.Exec("INSERT INTO group_commit_probe (v) VALUES (100)"));
      MutexLock lock(mu);
      in_body = true;
      cv.notify_all();
      lock.Wait(cv, [&] { return release; });
      return true;
    }));
  });
  {
    MutexLock lock(mu);
    lock.Wait(cv, [&] { return in_body; });
  }
  std::vector<std::thread> later;
  for (int i = 1; i <= 4; ++i) {
    later.emplace_back([&, i] {
      auto r = ds_->Write<bool>([&](Tx& tx) -> Result<bool> {
        FP_TRY(tx.Exec("INSERT INTO group_commit_probe (v) VALUES (?)", i));
        if (i == 2) return Fail(Error::InvalidRequest("write 2 refuses"));
        return true;
      });
      EXPECT_EQ(static_cast<bool>(r), i != 2);
    });
  }
  {
    MutexLock lock(mu);
    lock.Wait(cv, [&] { return queued >= 4; });  // the four behind the first writer
  }
  {
    MutexLock lock(mu);
    release = true;
  }
  cv.notify_all();
  first.join();
  for (auto& t : later) t.join();
  ds_->TEST_SetSyncPoint(nullptr);
  EXPECT_EQ(ds_->sqlite_commits() - sqlite_before, 2);
  EXPECT_EQ(ds_->durable_commits() - commits_before, 4);
  EXPECT_EQ(Count(*ds_), 4);  // 100, 1, 3, 4: the refused write left nothing
  auto refused = ds_->Read<int64_t>([](Tx& tx) -> Result<int64_t> {
    return FP_TRY(tx.QueryRow("SELECT count(*) FROM group_commit_probe WHERE v = 2"))->Int(0);
  });
  EXPECT_EQ(refused.value(), 0);
}

TEST_F(GroupCommitTest, AWriteThatThrowsFailsAloneAndWritingGoesOn) {
  auto thrown = ds_->Write<bool>([](Tx& tx) -> Result<bool> {
    FP_TRY(tx.Exec("INSERT INTO group_commit_probe (v) VALUES (7)"));
    throw std::runtime_error("boom");
  });
  ASSERT_FALSE(thrown);
  EXPECT_NE(thrown.error().message().find("boom"), std::string::npos);
  // Its insert was undone, and the writer is free for the next write.
  ASSERT_TRUE(Insert(*ds_, 8));
  EXPECT_EQ(Count(*ds_), 1);
}

}  // namespace
}  // namespace fp::db
