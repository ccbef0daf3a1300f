// Idempotency records commit with the effect they answer for (db/idempotency.h).

#include "db/idempotency.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "db/sagas.h"
#include "db/testing/temp_datastore.h"

namespace fp::db {
namespace {

using testing::TempDatastore;

class IdempotencyScopeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(ds_->Write<bool>([](Tx& tx) -> Result<bool> {
      FP_TRY(tx.Exec("CREATE TABLE effect (v INTEGER NOT NULL)"));
      return true;
    }));
  }

  // The effect: a row, whose value is the write's result.
  Result<int64_t> Effect(int64_t v, bool fail = false) {
    return ds_->Write<int64_t>([&](Tx& tx) -> Result<int64_t> {
      FP_TRY(tx.Exec("INSERT INTO effect (v) VALUES (?)", v));
      if (fail) return Fail(Error::InvalidRequest("refused after the insert"));
      return v;
    });
  }

  int64_t Effects() {
    return ds_
        ->Read<int64_t>([](Tx& tx) -> Result<int64_t> {
          return FP_TRY(tx.QueryRow("SELECT count(*) FROM effect"))->Int(0);
        })
        .value();
  }

  static SagaRow ToySaga() {
    SagaRow row;
    row.id = Uuid::Random();
    row.name = "toy";
    row.dag = "{}";
    row.owner = SagaOwner{"sec", 1};
    return row;
  }

  static void AnswerWithValue(IdempotencyScope& scope) {
    scope.AnswerWith<int64_t>([](const int64_t& v) {
      return IdempotencyScope::Answer{201, std::to_string(v)};
    });
  }

  TempDatastore ds_;
  Uuid token_ = Uuid::Random();
};

TEST_F(IdempotencyScopeTest, TheAnswerCommitsWithTheEffectAndNotWithoutIt) {
  {
    IdempotencyScope scope(*ds_, token_, "k", "hash");
    AnswerWithValue(scope);
    EXPECT_FALSE(Effect(7, /*fail=*/true));  // rolled back: no effect, no record
    EXPECT_EQ(scope.effect(), IdempotencyScope::Effect::kNone);
    ASSERT_TRUE(Effect(8));
    EXPECT_EQ(scope.effect(), IdempotencyScope::Effect::kAnswered);
    ASSERT_TRUE(Effect(9));  // later writes of the request record nothing more
  }
  auto record = IdempotencyLookup(*ds_, token_, "k");
  ASSERT_TRUE(record && *record);
  EXPECT_TRUE((*record)->done);
  EXPECT_EQ((*record)->status, 201);
  EXPECT_EQ((*record)->body, "8");
  EXPECT_EQ((*record)->request_sha256, "hash");
  EXPECT_EQ(Effects(), 2);
}

TEST_F(IdempotencyScopeTest, ASecondRequestUnderTheKeyRollsBackItsEffect) {
  {
    IdempotencyScope first(*ds_, token_, "k", "hash");
    AnswerWithValue(first);
    ASSERT_TRUE(Effect(1));
  }
  // E.g. another server on the same database ran the request first.
  IdempotencyScope second(*ds_, token_, "k", "hash");
  AnswerWithValue(second);
  auto again = Effect(2);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().kind(), ErrorKind::kServiceUnavailable);
  EXPECT_EQ(second.effect(), IdempotencyScope::Effect::kTaken);
  EXPECT_EQ(Effects(), 1);
}

TEST_F(IdempotencyScopeTest, ASagaCreatedUnderTheKeyIsLinkedInItsCreatingCommit) {
  SagaRow row = ToySaga();
  {
    IdempotencyScope scope(*ds_, token_, "k", "hash");
    ASSERT_TRUE(DatastoreSagaStore(*ds_).Create(row));
    EXPECT_EQ(scope.effect(), IdempotencyScope::Effect::kSaga);
    EXPECT_EQ(scope.saga_id(), row.id);
  }
  auto record = IdempotencyLookup(*ds_, token_, "k");
  ASSERT_TRUE(record && *record);
  EXPECT_FALSE((*record)->done);
  EXPECT_EQ((*record)->saga_id, row.id);
  ASSERT_TRUE(IdempotencyFinish(*ds_, token_, "k", "hash", 202, "{}"));
  record = IdempotencyLookup(*ds_, token_, "k");
  EXPECT_TRUE((*record)->done && (*record)->status == 202);
}

// PostgreSQL runs a write's body again after a serialization failure: what the rolled-back
// run recorded must not stop the retried run from recording (else the saga commits without its
// key's record).
TEST_F(IdempotencyScopeTest, ARetriedWriteRecordsTheKeyInTheRunThatCommits) {
  if (!testing::OnPostgres()) GTEST_SKIP() << "the SQLite engine runs a body once";
  SagaRow row = ToySaga();
  int runs = 0;
  {
    IdempotencyScope scope(*ds_, token_, "k", "hash");
    ASSERT_TRUE(ds_->Write<bool>([&](Tx& tx) -> Result<bool> {
      ++runs;
      FP_TRY(SagaCreateIn(tx, row));
      if (runs == 1) {
        FP_TRY(tx.Exec("DO $$BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '40001'; END$$"));
      }
      return true;
    }));
    EXPECT_EQ(runs, 2);
    EXPECT_EQ(scope.effect(), IdempotencyScope::Effect::kSaga);
  }
  auto record = IdempotencyLookup(*ds_, token_, "k");
  ASSERT_TRUE(record && *record) << "the saga committed without its key's record";
  EXPECT_EQ((*record)->saga_id, row.id);
}

// A keyed request's thread that leads a group commit runs other requests' writes: a saga one
// of them creates must not be linked to the leader's key.
TEST_F(IdempotencyScopeTest, WritesLedByAKeyedRequestsThreadAreNotItsOwn) {
  if (testing::OnPostgres()) {
    GTEST_SKIP() << "SQLite group commit: one thread running another's write (no batches on "
                    "PostgreSQL)";
  }
  std::mutex mu;
  std::condition_variable cv;
  int queued = 0;
  bool blocker_in = false, blocker_go = false;
  ds_->TEST_SetSyncPoint([&](std::string_view point) {
    if (point != "tx:queued") return;
    std::lock_guard lock(mu);
    ++queued;
    cv.notify_all();
  });
  auto wait_for = [&](auto done) {
    std::unique_lock lock(mu);
    cv.wait(lock, done);
  };
  // Holds the write lane so that the keyed write, then the other, queue behind it: the keyed
  // one leads the next batch, which takes the other.
  std::thread blocker([&] {
    ASSERT_TRUE(ds_->Write<bool>([&](Tx&) -> Result<bool> {
      std::unique_lock lock(mu);
      blocker_in = true;
      cv.notify_all();
      cv.wait(lock, [&] { return blocker_go; });
      return true;
    }));
  });
  wait_for([&] { return blocker_in; });
  std::thread keyed([&] {
    IdempotencyScope scope(*ds_, token_, "leader", "hash");
    ASSERT_TRUE(ds_->Write<bool>([](Tx&) -> Result<bool> { return true; }));  // no effect
    EXPECT_EQ(scope.effect(), IdempotencyScope::Effect::kNone);
  });
  wait_for([&] { return queued == 1; });
  SagaRow row = ToySaga();
  std::thread other([&] { ASSERT_TRUE(DatastoreSagaStore(*ds_).Create(row)); });
  wait_for([&] { return queued == 2; });
  {
    std::lock_guard lock(mu);
    blocker_go = true;
  }
  cv.notify_all();
  blocker.join();
  keyed.join();
  other.join();
  ds_->TEST_SetSyncPoint(nullptr);
  auto record = IdempotencyLookup(*ds_, token_, "leader");
  ASSERT_TRUE(record);
  EXPECT_FALSE(*record) << "the other request's saga was linked to the leader's key";
}

}  // namespace
}  // namespace fp::db
