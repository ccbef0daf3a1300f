// The PostgreSQL engine against the test cluster (FLOATPLANE_TEST_POSTGRES; skipped without
// one): whole-body retries, the retry budget, lost connections, unknown commit outcomes, and
// the pool (the schema's migrations: schema_test.cc).

#include "db/postgres/engine.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <future>
#include <thread>
#include <vector>

#include "common/testing/wait_for.h"
#include "db/schema.h"
#include "db/testing/temp_datastore.h"

namespace fp::db::postgres {
namespace {

using testing::OnPostgres;
using testing::TempPostgresDatabase;

constexpr std::string_view kRaise40001 =
    "DO $$BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '40001'; END$$";

class PgEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!OnPostgres()) GTEST_SKIP() << "FLOATPLANE_TEST_POSTGRES is not set";
    db_ = std::make_unique<TempPostgresDatabase>();
    Open({});
    ASSERT_TRUE(engine_->Write([](Connection& c) -> Status {
      FP_TRY(c.Exec("CREATE TABLE t (k BIGINT PRIMARY KEY, v TEXT)", {}));
      return Ok();
    }));
  }
  void Open(PostgresOptions options) {
    engine_.reset();
    auto e = PgEngine::Open(db_->url(), options, sync_points_, MachineClock(), MachineRandom(),
                            [](PgConnection& c) { return MigratePostgresSchema(c); });
    ASSERT_TRUE(e) << e.error().message();
    engine_ = std::move(*e);
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
  // A fresh connection to the test database, outside the engine.
  std::unique_ptr<PgConnection> Outside() {
    return std::move(PgConnection::Open(db_->url()).value());
  }

  SyncPoints sync_points_;
  std::unique_ptr<TempPostgresDatabase> db_;
  std::unique_ptr<PgEngine> engine_;
};

// The round trips a write costs, as /metrics reports them (bench_attach divides them by the
// operations): BEGIN with the commit marker, sent with the first statement (and its prepare,
// once per connection) in one exchange, each later statement, COMMIT.
TEST_F(PgEngineTest, EveryExchangeWithTheServerCountsAsARoundTrip) {
  Open(PostgresOptions{.pool_size = 1});
  auto write = [&](int64_t k) {
    return engine_->Write([&](Connection& c) -> Status {
      FP_TRY(c.Exec("INSERT INTO t (k, v) VALUES (?, 'x')", {k}));
      return Ok();
    });
  };
  // The engine's once-a-minute chores (pruning old commit markers) ride on an early write.
  ASSERT_TRUE(engine_->Write([&](Connection& c) -> Status {
    FP_TRY(c.Exec("INSERT INTO t (k, v) VALUES (?, 'warm-up')", {int64_t{0}}));
    return Ok();
  }));
  int64_t before = engine_->stats().round_trips;
  ASSERT_TRUE(write(1));
  EXPECT_EQ(engine_->stats().round_trips - before, 2) << "BEGIN + prepare + execute, COMMIT";
  before = engine_->stats().round_trips;
  ASSERT_TRUE(write(2));
  EXPECT_EQ(engine_->stats().round_trips - before, 2)
      << "prepared already: BEGIN + execute, COMMIT";
  EXPECT_EQ(Count("SELECT count(*) FROM t WHERE k IN (1, 2)"), 2);
  before = engine_->stats().round_trips;
  int64_t seen = 0;
  ASSERT_TRUE(engine_->Read(
      [&](Connection& c) -> Status {
        EXPECT_EQ(c.Query("SELECT count(*) FROM t", {}).value().front().Int(0), 3);
        EXPECT_EQ(c.Query("SELECT count(*) FROM t WHERE k = ?", {int64_t{2}}).value().size(), 1u);
        return Ok();
      },
      seen));
  EXPECT_EQ(engine_->stats().round_trips - before, 3)
      << "BEGIN + prepare + execute, prepare + execute, COMMIT";
  // A body that runs no statement begins nothing and commits nothing.
  before = engine_->stats().round_trips;
  ASSERT_TRUE(engine_->Write([&](Connection&) -> Status { return Ok(); }));
  EXPECT_EQ(engine_->stats().round_trips - before, 0);
  EXPECT_EQ(engine_->stats().retries, 0);
}

// A write's commit marker goes as a prepared statement, held back with the opening (it went as
// text with the marker's id in it, parsed and planned at every write).
TEST_F(PgEngineTest, TheCommitMarkerIsInsertedByAPreparedStatement) {
  Open(PostgresOptions{.pool_size = 1});  // one session: its prepared statements
  const int64_t markers = Count("SELECT count(*) FROM commit_marker");
  for (int64_t k = 1; k <= 2; ++k) {
    ASSERT_TRUE(engine_->Write([&](Connection& c) -> Status {
      FP_TRY(c.Exec("INSERT INTO t (k, v) VALUES (?, 'x')", {k}));
      return Ok();
    }));
  }
  int64_t prepared = -1;
  ASSERT_TRUE(engine_->Write([&](Connection& c) -> Status {
    prepared = FP_TRY(c.Query("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE "
                              "'INSERT INTO commit_marker%'",
                              {}))
                   .front()
                   .Int(0);
    return Ok();
  }));
  EXPECT_EQ(prepared, 1);
  EXPECT_EQ(Count("SELECT count(*) FROM commit_marker"), markers + 3);
}

// A read's last statement (QueryLast) carries its COMMIT: one exchange for a read of one
// statement, and nothing after it.
TEST_F(PgEngineTest, AReadsLastStatementCarriesItsCommitInTheSameExchange) {
  Open(PostgresOptions{.pool_size = 1});
  ASSERT_TRUE(engine_->Write([&](Connection& c) -> Status {
    FP_TRY(c.Exec("INSERT INTO t (k, v) VALUES (1, 'one')", {}));
    FP_TRY(
        c.Exec("CREATE FUNCTION conflict() RETURNS int LANGUAGE plpgsql AS $$BEGIN RAISE "
               "EXCEPTION 'injected' USING ERRCODE = '40001'; END$$",
               {}));
    return Ok();
  }));
  int64_t seen = 0;
  auto read = [&](const std::function<Status(Connection&)>& body) {
    const int64_t before = engine_->stats().round_trips;
    Status s = engine_->Read(body, seen);
    return std::make_pair(std::move(s), engine_->stats().round_trips - before);
  };
  for (int run = 0; run < 2; ++run) {  // with the prepare, then without
    auto [s, trips] = read([&](Connection& c) -> Status {
      auto rows = FP_TRY(c.QueryLast("SELECT v FROM t WHERE k = ?", {int64_t{1}}));
      EXPECT_EQ(rows.size(), 1u);
      if (!rows.empty()) {
        EXPECT_EQ(rows.front().Text(0), "one");
      }
      return Ok();
    });
    ASSERT_TRUE(s) << s.error().message();
    EXPECT_EQ(trips, 1) << "BEGIN, (prepare,) execute and COMMIT in one pipeline; run " << run;
  }
  // After another statement too: the last one carries the COMMIT.
  auto [two, two_trips] = read([&](Connection& c) -> Status {
    FP_TRY(c.Query("SELECT 1", {}));
    FP_TRY(c.QueryLast("SELECT 2", {}));
    return Ok();
  });
  ASSERT_TRUE(two) << two.error().message();
  EXPECT_EQ(two_trips, 2);

  // Nothing runs after it: the transaction has ended.
  auto [after, after_trips] = read([&](Connection& c) -> Status {
    FP_TRY(c.QueryLast("SELECT 1", {}));
    FP_TRY(c.Query("SELECT 2", {}));
    return Ok();
  });
  ASSERT_FALSE(after);
  EXPECT_EQ(after.error().kind(), ErrorKind::kInternal);
  EXPECT_NE(after.error().message().find("after the transaction's last"), std::string::npos)
      << after.error().message();
  EXPECT_EQ(after_trips, 1) << "neither the statement after it nor a ROLLBACK was sent";

  // A conflict in it runs the body again, which then succeeds on the same (only) connection.
  int runs = 0;
  auto [retried, retried_trips] = read([&](Connection& c) -> Status {
    FP_TRY(c.QueryLast(++runs == 1 ? "SELECT conflict()" : "SELECT 1", {}));
    return Ok();
  });
  ASSERT_TRUE(retried) << retried.error().message();
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(retried_trips, 3) << "the failed pipeline, its ROLLBACK, the second run";

  // In a write it is an ordinary statement: the COMMIT follows (with the body's writes).
  ASSERT_TRUE(engine_->Write([&](Connection& c) -> Status {
    FP_TRY(c.Exec("INSERT INTO t (k, v) VALUES (2, 'two')", {}));
    auto rows = FP_TRY(c.QueryLast("SELECT count(*) FROM t", {}));
    EXPECT_EQ(rows.front().Int(0), 2);
    FP_TRY(c.Exec("INSERT INTO t (k, v) VALUES (3, 'three')", {}));
    return Ok();
  }));
  EXPECT_EQ(Count("SELECT count(*) FROM t"), 3);
}

TEST_F(PgEngineTest, ASerializationFailureRunsTheWholeBodyAgain) {
  for (std::string_view code : {"40001", "40P01"}) {
    int runs = 0;
    int64_t k = code == "40001" ? 1 : 2;
    Status s = engine_->Write([&](Connection& c) -> Status {
      ++runs;
      FP_TRY(c.Exec("INSERT INTO t (k, v) VALUES (?, 'x')", {k}));
      if (runs == 1) {
        // The failure comes after the body's first statement: the retry must start from the
        // top, with that insert rolled back (else the second run's insert would collide).
        FP_TRY(c.Exec(fmt::format("DO $$BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '{}'; "
                                  "END$$",
                                  code),
                      {}));
      }
      return Ok();
    });
    ASSERT_TRUE(s) << s.error().message();
    EXPECT_EQ(runs, 2) << code;
  }
  EXPECT_EQ(Count("SELECT count(*) FROM t"), 2);
  EXPECT_EQ(engine_->stats().durable_commits, 3);  // the table, then the two rows
}

// After a conflict, the next attempts queue (engine.cc): they take the retry_queue lock before
// their snapshot, so that one of them at a time runs and each sees the others' commits.
TEST_F(PgEngineTest, AWriteRetriedAfterAConflictRunsQueued) {
  std::vector<int64_t> held;  // per run: whether it held the queue's lock
  Status s = engine_->Write([&](Connection& c) -> Status {
    held.push_back(FP_TRY(c.Query("SELECT count(*) FROM pg_locks WHERE locktype = 'relation' AND "
                                  "relation = 'retry_queue'::regclass AND pid = "
                                  "pg_backend_pid() AND mode = 'ExclusiveLock' AND granted",
                                  {}))
                       .front()
                       .Int(0));
    if (held.size() < 3) FP_TRY(c.Exec(kRaise40001, {}));
    return Ok();
  });
  ASSERT_TRUE(s) << s.error().message();
  EXPECT_EQ(held, (std::vector<int64_t>{0, 1, 1})) << "the first attempt does not queue";

  // A queued attempt waits for the lock's holder: here an outside session holding it.
  auto outside = Outside();
  ASSERT_TRUE(outside->Run("BEGIN; LOCK TABLE retry_queue IN EXCLUSIVE MODE"));
  std::atomic<int> runs{0};
  std::thread writer([&] {
    (void)engine_->Write([&](Connection& c) -> Status {
      if (runs.fetch_add(1) == 0) FP_TRY(c.Exec(kRaise40001, {}));
      FP_TRY(c.Exec("INSERT INTO t (k, v) VALUES (7, 'queued')", {}));
      return Ok();
    });
  });
  // The retry's lock, sent with its first statement and before it, waits: it shows in
  // pg_locks as not granted, and the statement has not run.
  auto waiting = [&] {
    return outside
        ->Query(
            "SELECT count(*) FROM pg_locks WHERE relation = 'retry_queue'::regclass AND "
            "NOT granted",
            {})
        .value()
        .front()
        .Int(0);
  };
  fp::testing::WaitFor([&] { return waiting() != 0; });
  EXPECT_EQ(waiting(), 1);
  EXPECT_EQ(Count("SELECT count(*) FROM t WHERE k = 7"), 0);
  EXPECT_EQ(runs.load(), 2) << "the second run's first statement waits for the lock";
  ASSERT_TRUE(outside->Run("COMMIT"));
  writer.join();
  EXPECT_EQ(runs.load(), 2);
  EXPECT_EQ(Count("SELECT count(*) FROM t WHERE k = 7"), 1);
}

TEST_F(PgEngineTest, AFailureSwallowedByTheBodyIsStillRetriedAndNeverCommitsHalfAWrite) {
  int runs = 0;
  Status s = engine_->Write([&](Connection& c) -> Status {
    ++runs;
    FP_TRY(c.Exec("INSERT INTO t (k, v) VALUES (?, 'x')", {int64_t{runs}}));
    if (runs == 1) (void)c.Exec(kRaise40001, {});  // the error is dropped, not returned
    return Ok();
  });
  ASSERT_TRUE(s) << s.error().message();
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(Count("SELECT count(*) FROM t"), 1);
  EXPECT_EQ(Count("SELECT max(k) FROM t"), 2);

  // A swallowed error that is not retryable fails the write instead of a COMMIT that rolls back.
  s = engine_->Write([&](Connection& c) -> Status {
    FP_TRY(c.Exec("INSERT INTO t (k, v) VALUES (10, 'x')", {}));
    (void)c.Exec("SELECT * FROM no_such_table", {});
    return Ok();
  });
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind(), ErrorKind::kInternal);
  EXPECT_EQ(Count("SELECT count(*) FROM t WHERE k = 10"), 0);
}

// A database that takes no connections (down, restarting, failing over) is a 503 that says
// so, not that it is busy.
TEST_F(PgEngineTest, ADatabaseThatCannotBeReachedIsUnavailableAndSaysSo) {
  Open(PostgresOptions{.pool_size = 2, .retry_deadline = std::chrono::milliseconds(300)});
  auto admin = std::move(PgConnection::Open(db_->admin_url()).value());
  ASSERT_TRUE(
      admin->Run(fmt::format("ALTER DATABASE \"{}\" ALLOW_CONNECTIONS false", db_->name())));
  ASSERT_TRUE(admin->Run(fmt::format(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{}'", db_->name())));
  Status s = engine_->Write([&](Connection& c) -> Status {
    FP_TRY(c.Exec("INSERT INTO t (k, v) VALUES (1, 'x')", {}));
    return Ok();
  });
  ASSERT_TRUE(admin->Run(fmt::format("ALTER DATABASE \"{}\" ALLOW_CONNECTIONS true", db_->name())));
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind(), ErrorKind::kServiceUnavailable);
  EXPECT_NE(s.error().message().find("the database cannot be reached"), std::string::npos)
      << s.error().message();
}

TEST_F(PgEngineTest, AnExhaustedRetryBudgetIsUnavailableNotInternal) {
  Open(PostgresOptions{.pool_size = 2, .retry_deadline = std::chrono::milliseconds(300)});
  int runs = 0;
  auto start = std::chrono::steady_clock::now();
  Status s = engine_->Write([&](Connection& c) -> Status {
    ++runs;
    FP_TRY(c.Exec(kRaise40001, {}));
    return Ok();
  });
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind(), ErrorKind::kServiceUnavailable);
  EXPECT_EQ(s.error().HttpStatus(), 503);
  EXPECT_NE(s.error().message().find("retry the request"), std::string::npos)
      << s.error().message();
  EXPECT_NE(s.error().message().find("the database is too busy"), std::string::npos)
      << s.error().message();
  EXPECT_GT(runs, 2);
  EXPECT_GE(took, std::chrono::milliseconds(300));
  EXPECT_LT(took, std::chrono::seconds(3));
  // Reads too.
  int64_t seen = -1;
  Status r = engine_->Read(
      [&](Connection& c) -> Status { return c.Exec(kRaise40001, {}).map([](int64_t) {}); }, seen);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind(), ErrorKind::kServiceUnavailable);
  EXPECT_EQ(seen, 0);
}

// Nothing waits past the retry deadline: a statement blocked on a lock, and a transaction
// waiting for a pooled connection, end in a 503 that says why, instead of waiting as long as
// the blocker lasts (a session stuck on a dropped network, a hung peer).
TEST_F(PgEngineTest, ABlockedStatementEndsAtTheDeadline) {
  PostgresOptions options;
  options.retry_deadline = std::chrono::milliseconds(300);
  Open(options);
  auto outside = Outside();
  ASSERT_TRUE(outside->Run("BEGIN; LOCK TABLE t IN ACCESS EXCLUSIVE MODE"));
  std::promise<Status> answer;
  std::thread writer([&] {
    answer.set_value(engine_->Write([](Connection& c) -> Status {
      FP_TRY(c.Exec("INSERT INTO t (k, v) VALUES (1, 'blocked')", {}));
      return Ok();
    }));
  });
  auto future = answer.get_future();
  bool ended = future.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  ASSERT_TRUE(outside->Run("COMMIT"));
  writer.join();
  ASSERT_TRUE(ended) << "the write waited for the lock past its deadline";
  Status s = future.get();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind(), ErrorKind::kServiceUnavailable);
  EXPECT_NE(s.error().message().find("too busy"), std::string::npos) << s.error().message();
  EXPECT_NE(s.error().message().find("due to statement timeout"), std::string::npos)
      << s.error().message();
}

// A session whose client is gone before COMMIT is ended by the server soon after the deadline
// (it would otherwise hold its rows until the server noticed the lost client: hours).
TEST_F(PgEngineTest, EveryTransactionEndsAnIdleSessionSoonAfterItsDeadline) {
  int64_t idle_ms = -1;
  int64_t seen = 0;
  ASSERT_TRUE(engine_->Read(
      [&](Connection& c) -> Status {
        auto rows =
            FP_TRY(c.Query("SELECT setting::bigint FROM pg_settings WHERE name = "
                           "'idle_in_transaction_session_timeout'",
                           {}));
        idle_ms = rows.front().Int(0);
        return Ok();
      },
      seen));
  EXPECT_GT(idle_ms, 10000) << "the deadline's rest plus 10 s";
  EXPECT_LE(idle_ms, 15000);
}

TEST_F(PgEngineTest, WaitingForAPooledConnectionEndsAtTheDeadline) {
  PostgresOptions options;
  options.pool_size = 1;
  options.retry_deadline = std::chrono::milliseconds(300);
  Open(options);
  std::promise<void> holding;
  std::promise<void> release;
  std::thread holder([&] {
    (void)engine_->Write([&](Connection&) -> Status {
      holding.set_value();
      release.get_future().wait_for(std::chrono::seconds(10));
      return Ok();
    });
  });
  holding.get_future().wait();
  auto start = std::chrono::steady_clock::now();
  int64_t seen = 0;
  Status s = engine_->Read([](Connection&) -> Status { return Ok(); }, seen);
  auto waited = std::chrono::steady_clock::now() - start;
  release.set_value();
  holder.join();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind(), ErrorKind::kServiceUnavailable);
  EXPECT_NE(s.error().message().find("is too busy"), std::string::npos) << s.error().message();
  EXPECT_NE(s.error().message().find("all 1 of this server's database connections stayed in use"),
            std::string::npos)
      << s.error().message();
  EXPECT_LT(waited, std::chrono::seconds(5)) << "it waited for the holder, not the deadline";
}

TEST_F(PgEngineTest, ConnectionsNoticeADeadNetworkInSeconds) {
  auto c = Outside();
  EXPECT_EQ(c->Option("keepalives_idle"), "5");
  EXPECT_EQ(c->Option("tcp_user_timeout"), "10000");
  EXPECT_EQ(c->Option("connect_timeout"), "5");
}

// A first statement libpq refuses to send (more parameters than the protocol carries) after
// the transaction's BEGIN was queued in the same pipeline: the connection cannot be used again
// (its queue holds the BEGIN), so it is given up rather than pooled, and the next write runs
// on a sound one.
TEST_F(PgEngineTest, AConnectionLeftWithAHalfSentPipelineIsNeverReused) {
  Open(PostgresOptions{.pool_size = 1, .retry_deadline = std::chrono::milliseconds(300)});
  std::vector<SqlValue> params(70000, SqlValue(int64_t{1}));
  std::string sql = "SELECT 1 WHERE 1 IN (?";
  for (size_t i = 1; i < params.size(); ++i) sql += ", ?";
  sql += ")";
  Status s = engine_->Write([&](Connection& c) -> Status {
    FP_TRY(c.Query(sql, params));
    return Ok();
  });
  ASSERT_FALSE(s);
  for (int64_t k = 1; k <= 3; ++k) {
    Status w = engine_->Write([&](Connection& c) -> Status {
      EXPECT_EQ(c.Exec("INSERT INTO t (k, v) VALUES (?, 'after')", {k}).value(), 1);
      return Ok();
    });
    ASSERT_TRUE(w) << w.error().message();
  }
  EXPECT_EQ(Count("SELECT count(*) FROM t WHERE v = 'after'"), 3);
}

TEST_F(PgEngineTest, ABodyErrorIsReturnedAsItIsWithoutRetry) {
  int runs = 0;
  Status s = engine_->Write([&](Connection& c) -> Status {
    ++runs;
    FP_TRY(c.Exec("INSERT INTO t (k, v) VALUES (20, 'x')", {}));
    return Fail(Error::InvalidRequest("no"));
  });
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind(), ErrorKind::kInvalidRequest);
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(Count("SELECT count(*) FROM t"), 0);
}

TEST_F(PgEngineTest, AConnectionLostInTheBodyIsSurvivedByRunningItAgain) {
  int runs = 0;
  Status s = engine_->Write([&](Connection& c) -> Status {
    ++runs;
    FP_TRY(c.Exec("INSERT INTO t (k, v) VALUES (30, 'x')", {}));
    if (runs == 1) FP_TRY(c.Query("SELECT pg_terminate_backend(pg_backend_pid())", {}));
    return Ok();
  });
  ASSERT_TRUE(s) << s.error().message();
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(Count("SELECT count(*) FROM t WHERE k = 30"), 1);
}

// The connection lost while its server process still runs the transaction (here: waiting for a
// lock, where it does not notice; on a real network, until keepalives tell it): the retry ends
// that process first, instead of waiting on the rows it still holds, its marker included.
TEST_F(PgEngineTest, ARetryAfterALostConnectionEndsTheOldSessionItWouldWaitOn) {
  ASSERT_TRUE(engine_->Write([](Connection& c) -> Status {
    FP_TRY(c.Exec("CREATE TABLE u (k BIGINT)", {}));
    return Ok();
  }));
  auto outside = Outside();
  ASSERT_TRUE(outside->Run("BEGIN; LOCK TABLE u IN ACCESS EXCLUSIVE MODE"));
  auto blocked = [&] {
    return outside
        ->Query("SELECT count(*) FROM pg_locks WHERE relation = 'u'::regclass AND NOT granted", {})
        .value()
        .front()
        .Int(0);
  };
  int runs = 0;
  std::thread breaker;
  Status s = engine_->Write([&](Connection& c) -> Status {
    ++runs;
    FP_TRY(c.Exec("INSERT INTO t (k, v) VALUES (40, 'x')", {}));
    if (runs == 1) {
      int fd = dynamic_cast<PgConnection&>(c).TEST_socket();
      breaker = std::thread([&, fd] {
        fp::testing::WaitFor([&] { return blocked() != 0; });
        shutdown(fd, SHUT_RDWR);
      });
      FP_TRY(c.Exec("LOCK TABLE u IN ACCESS SHARE MODE", {}));  // waits; the client is cut
    }
    return Ok();
  });
  breaker.join();
  ASSERT_TRUE(outside->Run("COMMIT"));
  ASSERT_TRUE(s) << s.error().message();
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(Count("SELECT count(*) FROM t WHERE k = 40"), 1);
}

TEST_F(PgEngineTest, EveryConnectionLostBetweenTransactionsIsReplaced) {
  // Open several pooled connections, then end them all from outside (what a restart does).
  std::vector<std::thread> threads;
  std::atomic<int> inside{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      int64_t seen = 0;
      (void)engine_->Read(
          [&](Connection& c) -> Status {
            ++inside;
            while (inside.load() < 4) std::this_thread::yield();
            return c.Query("SELECT 1", {}).map([](auto) {});
          },
          seen);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GE(engine_->stats().open_readers, 4);
  auto killed = Outside()->Query(
      "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = "
      "current_database() AND pid <> pg_backend_pid()",
      {});
  ASSERT_TRUE(killed);
  EXPECT_GE(killed->front().Int(0), 4);
  const int64_t attempts = engine_->TEST_write_attempts();
  Status s = engine_->Write([&](Connection& c) -> Status {
    return c.Exec("INSERT INTO t (k, v) VALUES (40, 'x')", {}).map([](int64_t) {});
  });
  ASSERT_TRUE(s) << s.error().message();
  // The first connection found lost drops the other idle ones with it: one failed attempt, not
  // one per lost connection.
  EXPECT_EQ(engine_->TEST_write_attempts() - attempts, 2);
  EXPECT_EQ(Count("SELECT count(*) FROM t WHERE k = 40"), 1);
  EXPECT_LE(engine_->stats().open_readers, 2) << "the lost idle connections were dropped";
}

// Transactions that find no idle connection open one new connection at a time: the others
// wait for it, or for a connection released meanwhile. A new backend costs PostgreSQL a process;
// a server's loops at its start opened five at once.
TEST_F(PgEngineTest, ABurstOfTransactionsOpensOneNewConnectionAtATime) {
  Open(PostgresOptions{.pool_size = 8});
  std::atomic<bool> open_may_finish{false};
  std::atomic<int> opening{0};
  std::atomic<int> most_at_once{0};
  std::atomic<int> opened{0};
  sync_points_.Set([&](std::string_view name) {
    if (name != "pg:opening_connection") return;
    const int now = ++opening;
    int most = most_at_once.load();
    while (now > most && !most_at_once.compare_exchange_weak(most, now)) {
    }
    if (++opened == 1) {
      // The burst's first new connection is held here until the rest of the burst is seen.
      while (!open_may_finish.load()) std::this_thread::yield();
    }
    --opening;
  });
  auto read = [&](std::atomic<bool>* inside, const std::atomic<bool>* leave) {
    int64_t seen = 0;
    return engine_->Read(
        [&](Connection& c) -> Status {
          if (inside != nullptr) *inside = true;
          if (leave != nullptr) {
            while (!leave->load()) std::this_thread::yield();
          }
          return c.Query("SELECT 1", {}).map([](auto) {});
        },
        seen);
  };
  // The pool's one open connection (the migration's) is held.
  std::atomic<bool> holder_inside{false};
  std::atomic<bool> holder_may_leave{false};
  std::future<Status> holder;
  std::vector<std::future<Status>> burst;
  // Whatever fails below, the held threads go on before the futures' destructors wait for
  // them, and the hook (whose state is this test's) is removed.
  struct Release {
    std::function<void()> release;
    ~Release() { release(); }
  } release_all{[&] {
    open_may_finish = true;
    holder_may_leave = true;
    sync_points_.Set(nullptr);
  }};
  holder = std::async(std::launch::async, read, &holder_inside, &holder_may_leave);
  ASSERT_TRUE(fp::testing::WaitFor([&] { return holder_inside.load(); }));
  for (int i = 0; i < 4; ++i) {
    burst.push_back(std::async(std::launch::async, read, nullptr, nullptr));
  }
  // One of the four opens a connection; the other three wait in the pool instead of opening
  // their own.
  EXPECT_TRUE(fp::testing::WaitFor([&] { return engine_->stats().waiting_readers == 3; }))
      << "waiting " << engine_->stats().waiting_readers << ", opened " << opened.load();
  EXPECT_EQ(opened.load(), 1);
  open_may_finish = true;
  holder_may_leave = true;
  for (auto& f : burst) EXPECT_TRUE(f.get());
  EXPECT_TRUE(holder.get());
  sync_points_.Set(nullptr);
  EXPECT_EQ(most_at_once.load(), 1);
  EXPECT_EQ(engine_->stats().waiting_readers, 0);
  EXPECT_LE(engine_->stats().open_readers, 5);
}

// A real restart of the server (FLOATPLANE_TEST_POSTGRES_RESTART: a shell command that restarts
// the test cluster, e.g. "scripts/pg-cluster stop DIR && scripts/pg-cluster start DIR"; skipped
// without one, since it stops every other test's database too), in the middle of a write.
TEST_F(PgEngineTest, AServerRestartDuringAWriteIsSurvived) {
  const char* restart = std::getenv("FLOATPLANE_TEST_POSTGRES_RESTART");
  if (restart == nullptr) GTEST_SKIP() << "FLOATPLANE_TEST_POSTGRES_RESTART is not set";
  Open(PostgresOptions{.pool_size = 4, .retry_deadline = std::chrono::seconds(30)});
  int runs = 0;
  Status s = engine_->Write([&](Connection& c) -> Status {
    ++runs;
    FP_TRY(c.Exec("INSERT INTO t (k, v) VALUES (80, 'x')", {}));
    if (runs == 1) {
      EXPECT_EQ(std::system(restart), 0);
    }
    return Ok();
  });
  ASSERT_TRUE(s) << s.error().message();
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(Count("SELECT count(*) FROM t WHERE k = 80"), 1);
}

TEST_F(PgEngineTest, ALostCommitThatLandedIsNotRunAgain) {
  int runs = 0;
  engine_->TEST_LoseNextCommit(PgEngine::CommitLoss::kAfterCommit);
  Status s = engine_->Write([&](Connection& c) -> Status {
    ++runs;
    return c.Exec("INSERT INTO t (k, v) VALUES (50, 'x')", {}).map([](int64_t) {});
  });
  ASSERT_TRUE(s) << s.error().message();
  EXPECT_EQ(runs, 1) << "the marker said it committed";
  EXPECT_EQ(Count("SELECT count(*) FROM t WHERE k = 50"), 1);
}

TEST_F(PgEngineTest, ALostCommitThatDidNotLandIsRunAgain) {
  int runs = 0;
  engine_->TEST_LoseNextCommit(PgEngine::CommitLoss::kBeforeCommit);
  Status s = engine_->Write([&](Connection& c) -> Status {
    ++runs;
    return c.Exec("INSERT INTO t (k, v) VALUES (60, 'x')", {}).map([](int64_t) {});
  });
  ASSERT_TRUE(s) << s.error().message();
  EXPECT_EQ(runs, 2) << "no marker: the write had not committed";
  EXPECT_EQ(Count("SELECT count(*) FROM t WHERE k = 60"), 1);
}

TEST_F(PgEngineTest, AConnectionLostAtCommitWaitsForTheOldSessionToEnd) {
  // The COMMIT's session is ended from outside as COMMIT is about to be sent: the engine must
  // decide by the marker (absent: the server rolled back) and run the write again.
  int runs = 0;
  std::atomic<bool> armed{true};
  sync_points_.Set([&](std::string_view name) {
    if (name != "postgres:committing" || !armed.exchange(false)) return;
    auto outside = Outside();
    constexpr std::string_view kInTransaction =
        "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
        "AND state = 'idle in transaction'";
    ASSERT_TRUE(
        outside->Query(fmt::format("SELECT pg_terminate_backend(pid) {}", kInTransaction), {}));
    // Gone before COMMIT is sent, so that the COMMIT cannot land first.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline &&
           !outside->Query(fmt::format("SELECT 1 {}", kInTransaction), {})->empty()) {
      std::this_thread::yield();
    }
  });
  Status s = engine_->Write([&](Connection& c) -> Status {
    ++runs;
    return c.Exec("INSERT INTO t (k, v) VALUES (70, 'x')", {}).map([](int64_t) {});
  });
  sync_points_.Set(nullptr);
  ASSERT_TRUE(s) << s.error().message();
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(Count("SELECT count(*) FROM t WHERE k = 70"), 1);
}

TEST_F(PgEngineTest, AReadInsideAWriteOnOneThreadDoesNotWaitForTheFullPool) {
  Open(PostgresOptions{.pool_size = 1});
  Status s = engine_->Write([&](Connection&) -> Status {
    int64_t seen = 0;
    return engine_->Read([](Connection& c) { return c.Query("SELECT 1", {}).map([](auto) {}); },
                         seen);
  });
  EXPECT_TRUE(s) << s.error().message();
}

TEST_F(PgEngineTest, ARealConflictBetweenTwoWritersIsRetried) {
  // Two writers each read the table then insert: under SERIALIZABLE one of them must be
  // rolled back and run again, seeing the other's row.
  std::atomic<int> started{0};
  std::atomic<int> runs{0};
  std::vector<int64_t> counts(2, -1);
  auto writer = [&](int i) {
    Status s = engine_->Write([&](Connection& c) -> Status {
      ++runs;
      int64_t n = FP_TRY(c.Query("SELECT count(*) FROM t", {})).front().Int(0);
      if (started.fetch_add(1) < 2) {
        while (started.load() < 2) std::this_thread::yield();  // both read before either writes
      }
      counts[static_cast<size_t>(i)] = n;
      return c.Exec("INSERT INTO t (k, v) VALUES (?, 'x')", {int64_t{100 + i}}).map([](int64_t) {});
    });
    EXPECT_TRUE(s) << s.error().message();
  };
  std::thread a(writer, 0), b(writer, 1);
  a.join();
  b.join();
  // At least one writer ran again; on a loaded machine the retries themselves may meet again
  // (each rereads then inserts), so more than three runs is also correct. What serializability
  // decides is the outcome: both rows, and the runs that committed saw 0 and 1 rows.
  EXPECT_GE(runs.load(), 3);
  EXPECT_EQ(Count("SELECT count(*) FROM t WHERE k >= 100"), 2);
  EXPECT_EQ(counts[0] + counts[1], 1) << "the retried writer saw the other's row";
}

}  // namespace
}  // namespace fp::db::postgres
