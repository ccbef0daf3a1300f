// The history pruner: one pass empties a backlog larger than a batch, leaves stuck and
// unfinished sagas, and the background thread prunes on its own until stopped. Time comes from
// a manual clock.

#include "loops/history_pruner.h"

#include <gtest/gtest.h>

#include "common/testing/manual_clock.h"
#include "common/testing/wait_for.h"
#include "db/idempotency.h"
#include "db/sagas.h"
#include "db/testing/temp_datastore.h"

namespace fp::loops {
namespace {

using db::testing::TempDatastore;
using fp::testing::ManualClock;

constexpr auto kRetention = std::chrono::hours(72);

class HistoryPrunerTest : public ::testing::Test {
 protected:
  // `n` sagas at rest in `state`, in one transaction (one sync instead of n).
  void MakeSagas(int n, db::SagaState state) {
    auto made = ds->Write<bool>([&](db::Tx& tx) -> Result<bool> {
      for (int i = 0; i < n; ++i) {
        Uuid id = Uuid::TimeOrdered();
        db::SagaOwner owner{"sec", 1};
        FP_TRY(db::SagaCreateIn(tx, db::SagaRow{id, "toy", "{}", db::SagaState::kRunning, owner}));
        FP_CHECK_OK(db::SagaRecordIn(tx, id, owner,
                                     db::SagaEvent{0, db::SagaEventType::kSucceeded, "{}"}, state,
                                     std::nullopt));
      }
      return true;
    });
    ASSERT_TRUE(made) << made.error().message();
  }

  int64_t SagaRows() { return db::SagaHistory(*ds).value().saga_rows; }

  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  TempDatastore ds{clock_};
};

TEST_F(HistoryPrunerTest, OnePassEmptiesABacklogOfSeveralBatches) {
  ASSERT_NO_FATAL_FAILURE(MakeSagas(1100, db::SagaState::kDone));
  ASSERT_NO_FATAL_FAILURE(MakeSagas(150, db::SagaState::kUnwound));
  ASSERT_NO_FATAL_FAILURE(MakeSagas(1, db::SagaState::kStuck));
  ASSERT_NO_FATAL_FAILURE(MakeSagas(1, db::SagaState::kUnwinding));
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(db::IdempotencyFinish(*ds, Uuid::Random(), "k", "hash", 201, "{}"));
  }
  clock_->Advance(std::chrono::microseconds(kRetention).count() + 1);
  ASSERT_NO_FATAL_FAILURE(MakeSagas(7, db::SagaState::kDone));  // recent

  HistoryPruner pruner(*ds, HistoryRetention{.retention = kRetention, .batch = 500});
  const int64_t commits = ds->durable_commits();
  auto pruned = pruner.PruneOnce();
  ASSERT_TRUE(pruned) << pruned.error().message();
  EXPECT_EQ(pruned->sagas, 1250);
  EXPECT_EQ(pruned->idempotency_keys, 3);
  // Small transactions: three full batches of sagas and a short one, one of keys.
  EXPECT_EQ(ds->durable_commits() - commits, 4);
  EXPECT_EQ(SagaRows(), 9);

  auto again = pruner.PruneOnce();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->sagas, 0);
  EXPECT_EQ(SagaRows(), 9);
}

TEST_F(HistoryPrunerTest, TheBackgroundThreadPrunesUntilStopped) {
  HistoryPruner pruner(
      *ds, HistoryRetention{.retention = kRetention, .period = std::chrono::milliseconds(5)});
  pruner.Start();
  ASSERT_NO_FATAL_FAILURE(MakeSagas(3, db::SagaState::kDone));
  ASSERT_NO_FATAL_FAILURE(MakeSagas(1, db::SagaState::kStuck));
  clock_->Advance(std::chrono::microseconds(kRetention).count() + 1);
  // The thread's period is on the datastore's clock: time passes while the test waits (its
  // first pass may have ended after the move above, and then waits a period from there).
  auto while_time_passes = [&](auto done, std::chrono::milliseconds timeout) {
    return fp::testing::WaitFor(
        [&] {
          clock_->Advance(std::chrono::milliseconds(5));
          return done();
        },
        timeout);
  };
  EXPECT_TRUE(while_time_passes([&] { return SagaRows() == 1; }, std::chrono::seconds(5)))
      << "saga rows: " << SagaRows();
  EXPECT_EQ(db::SagaHistory(*ds).value().sagas_pruned, 3);
  pruner.Stop();
  ASSERT_NO_FATAL_FAILURE(MakeSagas(2, db::SagaState::kDone));
  clock_->Advance(std::chrono::microseconds(kRetention).count() + 1);
  // Stopped: nothing prunes them (checked over many of the old periods).
  EXPECT_FALSE(while_time_passes([&] { return SagaRows() != 3; }, std::chrono::milliseconds(100)));
}

}  // namespace
}  // namespace fp::loops
