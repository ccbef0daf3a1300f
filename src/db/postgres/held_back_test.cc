// Writes held back (Connection::ExecLater) on the PostgreSQL engine, against the test cluster
// (FLOATPLANE_TEST_POSTGRES; skipped without one): they ride with the transaction's next
// statement or its COMMIT, and a count the server finds wrong fails the whole transaction
// with the caller's error, even when it went in the same exchange as the COMMIT. And the
// write queue (Connection::JoinWriteQueue), which the same opening exchange carries.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "db/postgres/engine.h"
#include "db/schema.h"
#include "db/testing/temp_datastore.h"

namespace fp::db::postgres {
namespace {

using testing::OnPostgres;
using testing::TempPostgresDatabase;

constexpr std::string_view kInsert = "INSERT INTO t (k, v) VALUES (?, 'x')";
constexpr std::string_view kConflict40001 =
    "DO $$BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '40001'; END$$";
constexpr std::string_view kUpdate = "UPDATE t SET v = 'y' WHERE k = ?";

class PgHeldBackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!OnPostgres()) GTEST_SKIP() << "FLOATPLANE_TEST_POSTGRES is not set";
    db_ = std::make_unique<TempPostgresDatabase>();
    // One connection: every transaction below runs on the one the previous left.
    auto e =
        PgEngine::Open(db_->url(), PostgresOptions{.pool_size = 1}, sync_points_, MachineClock(),
                       MachineRandom(), [](PgConnection& c) { return MigratePostgresSchema(c); });
    ASSERT_TRUE(e) << e.error().message();
    engine_ = std::move(*e);
    ASSERT_TRUE(engine_->Write([](Connection& c) -> Status {
      FP_TRY(c.Exec("CREATE TABLE t (k BIGINT PRIMARY KEY, v TEXT)", {}));
      return Ok();
    }));
    // Every statement below prepared once, and the engine's once-a-minute chore (pruning old
    // commit markers) done, so that the counts below are the transactions' own.
    ASSERT_TRUE(engine_->Write([](Connection& c) -> Status {
      FP_CHECK_OK(c.ExecLater(kInsert, {int64_t{0}}, -1, Error::Internal("unused")));
      FP_CHECK_OK(c.ExecLater(kUpdate, {int64_t{0}}, 1, Error::Internal("unused")));
      FP_TRY(c.Exec(kUpdate, {int64_t{0}}));
      FP_TRY(c.Query("SELECT count(*) FROM t", {}));
      return Ok();
    }));
  }
  int64_t Count(std::string_view sql) {
    int64_t n = -1;
    int64_t seen = 0;
    EXPECT_TRUE(engine_->Read(
        [&](Connection& c) -> Status {
          n = FP_TRY(c.Query(sql, {})).front().Int(0);
          return Ok();
        },
        seen));
    return n;
  }
  int64_t RoundTrips() const { return engine_->stats().round_trips; }

  SyncPoints sync_points_;
  std::unique_ptr<TempPostgresDatabase> db_;
  std::unique_ptr<PgEngine> engine_;
};

TEST_F(PgHeldBackTest, HeldBackWritesGoWithTheNextStatementOrWithTheCommit) {
  int64_t before = RoundTrips();
  int64_t seen_inside = -1;
  ASSERT_TRUE(engine_->Write([&](Connection& c) -> Status {
    FP_CHECK_OK(c.ExecLater(kInsert, {int64_t{1}}, -1, Error::Internal("unused")));
    FP_CHECK_OK(c.ExecLater(kUpdate, {int64_t{1}}, 1, Error::Internal("unused")));
    // Sent before this statement, in its exchange: it sees them.
    seen_inside =
        FP_TRY(c.Query("SELECT count(*) FROM t WHERE k = 1 AND v = 'y'", {})).front().Int(0);
    FP_CHECK_OK(c.ExecLater(kInsert, {int64_t{2}}, -1, Error::Internal("unused")));
    return Ok();
  }));
  EXPECT_EQ(RoundTrips() - before, 2)
      << "BEGIN + the two held back + the count; the third held back + COMMIT";
  EXPECT_EQ(seen_inside, 1);
  EXPECT_EQ(Count("SELECT count(*) FROM t WHERE k IN (1, 2)"), 2);
  // A body of held-back writes only: the begin, the writes and the COMMIT in one exchange.
  before = RoundTrips();
  ASSERT_TRUE(engine_->Write([&](Connection& c) -> Status {
    return c.ExecLater(kInsert, {int64_t{3}}, -1, Error::Internal("unused"));
  }));
  EXPECT_EQ(RoundTrips() - before, 1);
  EXPECT_EQ(Count("SELECT count(*) FROM t WHERE k = 3"), 1);
  EXPECT_EQ(engine_->stats().retries, 0);
}

// The count is checked by the server in the write's own statement, so a COMMIT sent in the
// same exchange never runs after it: nothing of the transaction stays, and the caller gets the
// error the write was held back with.
TEST_F(PgHeldBackTest, AHeldBackWriteThatChangedTheWrongCountFailsItsTransactionWithItsError) {
  int64_t before = RoundTrips();
  Status s = engine_->Write([&](Connection& c) -> Status {
    FP_CHECK_OK(c.ExecLater(kInsert, {int64_t{10}}, -1, Error::Internal("unused")));
    return c.ExecLater(kUpdate, {int64_t{999}}, 1, Error::NotFoundById("row", "999"));
  });
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind(), ErrorKind::kNotFound);
  EXPECT_EQ(s.error().message(), "not found: row with id \"999\"");
  EXPECT_EQ(RoundTrips() - before, 2) << "the begin, the writes and COMMIT; ROLLBACK";
  EXPECT_EQ(Count("SELECT count(*) FROM t WHERE k = 10"), 0);
  // Found at the next statement instead: that statement answers with the write's error.
  Status at_next = engine_->Write([&](Connection& c) -> Status {
    FP_CHECK_OK(c.ExecLater(kInsert, {int64_t{11}}, -1, Error::Internal("unused")));
    FP_CHECK_OK(c.ExecLater(kUpdate, {int64_t{999}}, 1, Error::NotFoundById("row", "999")));
    auto rows = c.Query("SELECT count(*) FROM t", {});
    EXPECT_FALSE(rows);
    if (!rows) return Fail(rows.error());
    return Ok();
  });
  ASSERT_FALSE(at_next);
  EXPECT_EQ(at_next.error().kind(), ErrorKind::kNotFound);
  EXPECT_EQ(Count("SELECT count(*) FROM t WHERE k = 11"), 0);
  // The one connection is usable again, and a write that changed its one row commits.
  ASSERT_TRUE(engine_->Write([&](Connection& c) -> Status {
    FP_CHECK_OK(c.ExecLater(kInsert, {int64_t{12}}, -1, Error::Internal("unused")));
    return c.ExecLater(kUpdate, {int64_t{12}}, 1, Error::NotFoundById("row", "12"));
  }));
  EXPECT_EQ(Count("SELECT count(*) FROM t WHERE k = 12 AND v = 'y'"), 1);
  EXPECT_EQ(engine_->stats().retries, 0);
}

// A read after the commit (Connection::QueryAfterCommit) goes in the COMMIT's exchange, in a
// transaction of its own begun after the commit: it sees the write's rows. When the write
// fails it is not run; when the read fails the write has still committed, is not retried, and
// the connection serves the next transaction; when the connection is lost during the read, the
// write has committed all the same, and no look for its outcome is made.
TEST_F(PgHeldBackTest, AReadAfterTheCommitGoesInItsExchangeAndSeesIt) {
  constexpr std::string_view kCount = "SELECT count(*) FROM t WHERE k >= ?";
  std::optional<int64_t> seen;
  auto sink = [&](std::vector<Row> rows) { seen = rows.front().Int(0); };
  int64_t before = RoundTrips();
  ASSERT_TRUE(engine_->Write([&](Connection& c) -> Status {
    FP_CHECK_OK(c.ExecLater(kInsert, {int64_t{20}}, -1, Error::Internal("unused")));
    FP_CHECK_OK(c.QueryAfterCommit(kCount, {int64_t{20}}, sink));
    EXPECT_FALSE(seen) << "not before the commit";
    FP_CHECK_OK(c.ExecLater(kInsert, {int64_t{21}}, -1, Error::Internal("unused")));
    return Ok();
  }));
  EXPECT_EQ(seen, 2) << "both rows, committed before the read began";
  EXPECT_EQ(RoundTrips() - before, 1)
      << "the begin, the writes, COMMIT and the read (and its prepare) in one exchange";
  before = RoundTrips();
  ASSERT_TRUE(engine_->Write([&](Connection& c) -> Status {
    FP_CHECK_OK(c.ExecLater(kInsert, {int64_t{22}}, -1, Error::Internal("unused")));
    return c.QueryAfterCommit(kCount, {int64_t{20}}, sink);
  }));
  EXPECT_EQ(seen, 3);
  EXPECT_EQ(RoundTrips() - before, 1) << "again, the read prepared already";

  // The write fails (a count the server finds wrong): no read.
  seen.reset();
  Status failed = engine_->Write([&](Connection& c) -> Status {
    FP_CHECK_OK(c.ExecLater(kInsert, {int64_t{23}}, -1, Error::Internal("unused")));
    FP_CHECK_OK(c.ExecLater(kUpdate, {int64_t{999}}, 1, Error::NotFoundById("row", "999")));
    return c.QueryAfterCommit(kCount, {int64_t{20}}, sink);
  });
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().kind(), ErrorKind::kNotFound);
  EXPECT_FALSE(seen);
  EXPECT_EQ(Count("SELECT count(*) FROM t WHERE k = 23"), 0);

  // The read fails (division by zero): the write stands, once, and the next write runs.
  ASSERT_TRUE(engine_->Write([&](Connection& c) -> Status {
    FP_CHECK_OK(c.ExecLater(kInsert, {int64_t{24}}, -1, Error::Internal("unused")));
    return c.QueryAfterCommit("SELECT count(*) / (count(*) - count(*)) FROM t WHERE k >= ?",
                              {int64_t{20}}, sink);
  }));
  EXPECT_FALSE(seen);
  EXPECT_EQ(Count("SELECT count(*) FROM t WHERE k = 24"), 1);
  ASSERT_TRUE(engine_->Write([&](Connection& c) -> Status {
    FP_CHECK_OK(c.ExecLater(kInsert, {int64_t{25}}, -1, Error::Internal("unused")));
    return c.QueryAfterCommit(kCount, {int64_t{20}}, sink);
  }));
  EXPECT_EQ(seen, 5);
  EXPECT_EQ(engine_->stats().retries, 0);

  // The connection is lost during the read (its server process ends): the COMMIT was answered,
  // so the write stands without a look for its marker, and the next write gets a new one.
  std::atomic<int> lookups{0};
  sync_points_.Set([&](std::string_view name) {
    if (name == "postgres:finding_out_a_lost_commit") ++lookups;
  });
  seen.reset();
  Status lost_read = engine_->Write([&](Connection& c) -> Status {
    FP_CHECK_OK(c.ExecLater(kInsert, {int64_t{26}}, -1, Error::Internal("unused")));
    return c.QueryAfterCommit(
        "SELECT count(*) FROM t WHERE k >= ? AND pg_terminate_backend("
        "pg_backend_pid())",
        {int64_t{20}}, sink);
  });
  sync_points_.Set(nullptr);
  ASSERT_TRUE(lost_read) << lost_read.error().message();
  EXPECT_EQ(lookups.load(), 0) << "the write was answered committed: nothing to find out";
  EXPECT_FALSE(seen);
  EXPECT_EQ(Count("SELECT count(*) FROM t WHERE k = 26"), 1);
  EXPECT_EQ(engine_->stats().retries, 0);
}

// A body that passes on nothing of a held-back write's failure still fails with that write's
// own error, not a generic one (the saga engine tells a fenced write by it).
TEST_F(PgHeldBackTest, AHeldBackFailureTheBodyDidNotPassOnIsStillTheAnswer) {
  Status s = engine_->Write([&](Connection& c) -> Status {
    FP_CHECK_OK(c.ExecLater(kUpdate, {int64_t{999}}, 1, Error::NotFoundById("row", "999")));
    (void)c.Query("SELECT count(*) FROM t", {});  // its answer, the failure, dropped
    return Ok();
  });
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind(), ErrorKind::kNotFound);
  EXPECT_EQ(s.error().message(), "not found: row with id \"999\"");
}

// A statement first used in an exchange that failed before its prepare ran, or held back by a
// body that failed (never sent), is prepared again at its next use: the connection forgets
// the names the server does not hold.
TEST_F(PgHeldBackTest, AStatementWhosePrepareNeverRanIsPreparedAtItsNextUse) {
  constexpr std::string_view kFirstUse = "UPDATE t SET v = 'z' WHERE k = ?";
  constexpr std::string_view kNeverSent = "DELETE FROM t WHERE k = ?";
  Status aborted = engine_->Write([&](Connection& c) -> Status {
    // Fails in the COMMIT's exchange before kFirstUse's prepare: that prepare is skipped.
    FP_CHECK_OK(c.ExecLater("UPDATE t SET v = (1 / (k - k))::text WHERE k = ?", {int64_t{0}}, -1,
                            Error::Internal("unused")));
    return c.ExecLater(kFirstUse, {int64_t{0}}, -1, Error::Internal("unused"));
  });
  ASSERT_FALSE(aborted);
  EXPECT_NE(aborted.error().message().find("division by zero"), std::string::npos)
      << aborted.error().message();
  Status failed = engine_->Write([&](Connection& c) -> Status {
    FP_CHECK_OK(c.ExecLater(kNeverSent, {int64_t{0}}, -1, Error::Internal("unused")));
    return Fail(Error::InvalidRequest("refused"));
  });
  ASSERT_FALSE(failed);
  // The one connection again: both statements are prepared, then run.
  Status again = engine_->Write([&](Connection& c) -> Status {
    FP_TRY(c.Exec(kFirstUse, {int64_t{0}}));
    FP_TRY(c.Exec(kNeverSent, {int64_t{0}}));
    return Ok();
  });
  EXPECT_TRUE(again) << again.error().message();
  EXPECT_EQ(Count("SELECT count(*) FROM t WHERE k = 0"), 0);
  EXPECT_EQ(engine_->stats().retries, 0);
}

// A read run again after a conflict never waits in the write queue, which a write run again
// does: it would hold up every write there for as long as it runs. The queue is held from
// outside throughout.
TEST_F(PgHeldBackTest, AReadRunAgainAfterAConflictDoesNotWaitInTheWriteQueue) {
  auto outside = PgConnection::Open(db_->url());
  ASSERT_TRUE(outside) << outside.error().message();
  ASSERT_TRUE((*outside)->Run("BEGIN; LOCK TABLE retry_queue IN EXCLUSIVE MODE"));
  int runs = 0;
  int64_t seen = 0;
  Status read = engine_->Read(
      [&](Connection& c) -> Status {
        if (++runs == 1) FP_TRY(c.Exec(kConflict40001, {}));
        FP_TRY(c.Query("SELECT count(*) FROM t", {}));
        return Ok();
      },
      seen);
  EXPECT_TRUE(read) << read.error().message();
  EXPECT_EQ(runs, 2);
  ASSERT_TRUE((*outside)->Run("ROLLBACK"));
}

// A body that fails after holding writes back sends none of them.
TEST_F(PgHeldBackTest, WritesHeldBackByABodyThatFailsAreNeverSent) {
  int64_t before = RoundTrips();
  Status s = engine_->Write([&](Connection& c) -> Status {
    FP_CHECK_OK(c.ExecLater(kInsert, {int64_t{20}}, -1, Error::Internal("unused")));
    return Fail(Error::InvalidRequest("refused"));
  });
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message(), "refused");
  EXPECT_EQ(RoundTrips() - before, 0);
  EXPECT_EQ(Count("SELECT count(*) FROM t WHERE k = 20"), 0);
}

// Writes that all read and change one row, each holding its transaction open a moment in
// between: concurrently they would fail each other (SERIALIZABLE) and run again; in the write
// queue each waits for the one before it, so none runs twice and none is lost.
TEST_F(PgHeldBackTest, WritesInTheWriteQueueTakeTurnsInsteadOfConflicting) {
  auto e =
      PgEngine::Open(db_->url(), PostgresOptions{.pool_size = 4}, sync_points_, MachineClock(),
                     MachineRandom(), [](PgConnection& c) { return MigratePostgresSchema(c); });
  ASSERT_TRUE(e) << e.error().message();
  PgEngine& engine = **e;
  ASSERT_TRUE(engine.Write([](Connection& c) -> Status {
    FP_TRY(c.Exec("UPDATE t SET v = '0' WHERE k = 0", {}));
    return Ok();
  }));
  constexpr int kWriters = 3;
  constexpr int kEach = 10;
  std::vector<std::thread> writers;
  std::atomic<int> failed{0};
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        Status s = engine.Write([&](Connection& c) -> Status {
          c.JoinWriteQueue();
          int64_t v = FP_TRY(c.Query("SELECT v::bigint FROM t WHERE k = 0", {})).at(0).Int(0);
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
          FP_TRY(c.Exec("UPDATE t SET v = ?::text WHERE k = 0", {v + 1}));
          return Ok();
        });
        if (!s) failed.fetch_add(1);
      }
    });
  }
  for (std::thread& t : writers) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(Count("SELECT v::bigint FROM t WHERE k = 0"), kWriters * kEach);
  EXPECT_EQ(engine.stats().retries, 0) << "a write in the queue collided with another";
}

}  // namespace
}  // namespace fp::db::postgres
