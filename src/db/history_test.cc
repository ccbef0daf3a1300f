// Bounded history: finished sagas with their node events, and idempotency keys, are deleted
// once older than the retention, oldest first and in batches, through indexes; stuck and
// unfinished sagas stay. Time comes from a manual clock: nothing here waits for days.

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "common/testing/manual_clock.h"
#include "db/audit_log.h"
#include "db/idempotency.h"
#include "db/postgres/connection.h"
#include "db/saga_history.h"
#include "db/sagas.h"
#include "db/testing/statement_trace.h"
#include "db/testing/temp_datastore.h"

namespace fp::db {
namespace {

using fp::testing::ManualClock;
using testing::TempDatastore;

using fp::testing::kSecond;
constexpr int64_t kDay = 24 * 3600 * kSecond;
constexpr int64_t kRetention = 3 * kDay;

class HistoryTest : public ::testing::Test {
 protected:
  // A saga with two node events that comes to rest in `state` (running: never) now.
  Uuid MakeSaga(SagaState state) { return MakeSagaIn(*ds, state); }
  static Uuid MakeSagaIn(Datastore& store, SagaState state) {
    Uuid id = Uuid::TimeOrdered();
    SagaOwner owner{"sec", 1};
    auto made = store.Write<bool>([&](Tx& tx) -> Result<bool> {
      FP_TRY(SagaCreateIn(tx, SagaRow{id, "toy", "{}", SagaState::kRunning, owner}));
      FP_CHECK_OK(SagaRecordIn(tx, id, owner, SagaEvent{0, SagaEventType::kSucceeded, "{}"},
                               std::nullopt, std::nullopt));
      std::optional<SagaState> rest;
      if (state != SagaState::kRunning) rest = state;
      FP_CHECK_OK(SagaRecordIn(tx, id, owner, SagaEvent{1, SagaEventType::kStarted, std::nullopt},
                               rest, std::nullopt));
      return true;
    });
    EXPECT_TRUE(made) << made.error().message();
    return id;
  }

  bool Exists(const Uuid& id) { return static_cast<bool>(SagaLoad(*ds, id)); }

  int64_t EventsOf(const Uuid& id) {
    return ds
        ->Read<int64_t>([&](Tx& tx) -> Result<int64_t> {
          return FP_TRY(tx.QueryRow("SELECT count(*) FROM saga_node_event WHERE saga_id = ?", id))
              ->Int(0);
        })
        .value();
  }

  int64_t Count(const std::string& sql) {
    return ds
        ->Read<int64_t>([&](Tx& tx) -> Result<int64_t> { return FP_TRY(tx.QueryRow(sql))->Int(0); })
        .value();
  }

  // SQLite's plan of `sql` (its parameters unbound), one step a line; "" for no statement.
  std::string Plan(const std::string& sql) { return testing::QueryPlan(*ds, sql); }

  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  TempDatastore ds{clock_};
};

TEST_F(HistoryTest, PruningDeletesExactlyTheFinishedSagasOlderThanTheRetention) {
  Uuid old_done = MakeSaga(SagaState::kDone);
  Uuid old_unwound = MakeSaga(SagaState::kUnwound);
  Uuid old_stuck = MakeSaga(SagaState::kStuck);
  Uuid old_running = MakeSaga(SagaState::kRunning);
  Uuid old_unwinding = MakeSaga(SagaState::kUnwinding);
  clock_->Advance(kSecond);
  Uuid at_the_limit = MakeSaga(SagaState::kDone);  // exactly the retention old: kept
  clock_->Advance(2 * kDay);
  Uuid recent_done = MakeSaga(SagaState::kDone);
  Uuid recent_unwound = MakeSaga(SagaState::kUnwound);
  clock_->Advance(kRetention - 2 * kDay);
  ASSERT_EQ(SagaHistory(*ds)->saga_rows, 8);

  auto pruned = SagaPruneFinished(*ds, kRetention, 500);
  ASSERT_TRUE(pruned) << pruned.error().message();
  EXPECT_EQ(*pruned, 2);
  EXPECT_FALSE(Exists(old_done));
  EXPECT_FALSE(Exists(old_unwound));
  EXPECT_EQ(EventsOf(old_done), 0);
  EXPECT_EQ(EventsOf(old_unwound), 0);
  for (const Uuid& kept :
       {old_stuck, old_running, old_unwinding, at_the_limit, recent_done, recent_unwound}) {
    EXPECT_TRUE(Exists(kept)) << kept.ToString();
    EXPECT_EQ(EventsOf(kept), 2) << kept.ToString();
  }
  EXPECT_EQ(Count("SELECT count(*) FROM saga_node_event"), 12);
  auto stats = SagaHistory(*ds);
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->saga_rows, 6);
  EXPECT_EQ(stats->sagas_pruned, 2);

  // Nothing else is old enough yet; a microsecond later the one at the limit is.
  EXPECT_EQ(SagaPruneFinished(*ds, kRetention, 500).value(), 0);
  clock_->Advance(1);
  EXPECT_EQ(SagaPruneFinished(*ds, kRetention, 500).value(), 1);
  EXPECT_FALSE(Exists(at_the_limit));
  EXPECT_EQ(SagaHistory(*ds)->sagas_pruned, 3);
  // However old, stuck and unfinished sagas stay.
  clock_->Advance(365 * kDay);
  EXPECT_EQ(SagaPruneFinished(*ds, kRetention, 500).value(), 2);
  for (const Uuid& kept : {old_stuck, old_running, old_unwinding}) EXPECT_TRUE(Exists(kept));
  EXPECT_EQ(SagaHistory(*ds)->saga_rows, 3);
}

TEST_F(HistoryTest, PruningGoesOldestFirstInBatchesOfTheGivenSize) {
  std::vector<Uuid> sagas;
  for (int i = 0; i < 5; ++i) {
    sagas.push_back(MakeSaga(SagaState::kDone));
    clock_->Advance(kSecond);
  }
  clock_->Advance(kRetention);
  EXPECT_EQ(SagaPruneFinished(*ds, kRetention, 2).value(), 2);
  EXPECT_FALSE(Exists(sagas[0]));
  EXPECT_FALSE(Exists(sagas[1]));
  EXPECT_TRUE(Exists(sagas[2]));
  EXPECT_EQ(SagaPruneFinished(*ds, kRetention, 2).value(), 2);
  EXPECT_EQ(SagaPruneFinished(*ds, kRetention, 2).value(), 1);  // short: nothing left
  EXPECT_EQ(SagaHistory(*ds)->saga_rows, 0);
  EXPECT_EQ(SagaHistory(*ds)->sagas_pruned, 5);
}

// The row count on GET /metrics is a counter the schema keeps on SQLite, not a scan of the table.
TEST_F(HistoryTest, TheSagaRowCountFollowsEveryInsertAndDelete) {
  EXPECT_EQ(SagaHistory(*ds)->saga_rows, 0);
  Uuid id = MakeSaga(SagaState::kDone);
  EXPECT_EQ(SagaHistory(*ds)->saga_rows, 1);
  // A create that finds the id taken inserts nothing and counts nothing.
  EXPECT_FALSE(DatastoreSagaStore(*ds)
                   .Create(SagaRow{id, "toy", "{}", SagaState::kRunning, {"sec", 1}})
                   .value());
  EXPECT_EQ(SagaHistory(*ds)->saga_rows, 1);
  MakeSaga(SagaState::kStuck);
  EXPECT_EQ(SagaHistory(*ds)->saga_rows, 2);
  EXPECT_EQ(SagaHistory(*ds)->saga_rows, Count("SELECT count(*) FROM saga"));
}

// PostgreSQL has no such counter: there, past a bound, the count is the planner's estimate
// (pg_class), so that a scrape of GET /metrics does not read a history of tens of millions of
// rows; at the bound and under it, and before any statistics, the rows are counted.
TEST_F(HistoryTest, OnPostgresPastTheBoundTheSagaRowCountIsThePlannersEstimate) {
  if (!testing::OnPostgres()) GTEST_SKIP() << "PostgreSQL only: SQLite keeps a counter row";
  for (int i = 0; i < 12; ++i) MakeSaga(SagaState::kDone);
  EXPECT_EQ(SagaHistory(*ds, 10)->saga_rows, 12);  // no statistics yet
  ASSERT_TRUE(ds->Write([](Tx& tx) -> Status {
    FP_TRY(tx.Exec("ANALYZE saga"));
    return Ok();
  }));
  clock_->Advance(kRetention + kSecond);
  ASSERT_EQ(SagaPruneFinished(*ds, kRetention, 3).value(), 3);
  // ANALYZE found 12 rows in the table's pages, and a delete frees no page: still 12.
  EXPECT_EQ(SagaHistory(*ds, 10)->saga_rows, 12);
  EXPECT_EQ(SagaHistory(*ds, 12)->saga_rows, 9);
}

TEST_F(HistoryTest, IdempotencyKeysArePrunedByAgeInBatches) {
  const Uuid token = Uuid::Random();
  auto record = [&](const std::string& key) {
    ASSERT_TRUE(IdempotencyFinish(*ds, token, key, "hash", 201, "{}"));
  };
  record("a");
  record("b");
  clock_->Advance(kSecond);
  record("c");
  clock_->Advance(kRetention);  // a and b are older than the retention; c is exactly as old
  EXPECT_EQ(IdempotencyPrune(*ds, kRetention, 1).value(), 1);
  EXPECT_EQ(IdempotencyPrune(*ds, kRetention, 1).value(), 1);
  EXPECT_EQ(IdempotencyPrune(*ds, kRetention, 1).value(), 0);
  EXPECT_TRUE(IdempotencyLookup(*ds, token, "c").value());
  EXPECT_EQ(Count("SELECT count(*) FROM idempotency_key"), 1);
  EXPECT_EQ(IdempotencyKeysPruned(*ds).value(), 2);
  // After pruning, the key is new again: a retry runs the request instead of a replay.
  EXPECT_FALSE(IdempotencyLookup(*ds, token, "a").value());
}

// A pass with nothing to prune (every pass but a few) commits nothing: it must not cost a log
// sync every period, nor show up in the commit counts of whoever watches them.
TEST_F(HistoryTest, NothingToPruneCommitsNothing) {
  MakeSaga(SagaState::kDone);
  ASSERT_TRUE(IdempotencyFinish(*ds, Uuid::Random(), "recent", "hash", 201, "{}"));
  const int64_t before = ds->durable_commits();
  EXPECT_EQ(SagaPruneFinished(*ds, kRetention, 100).value(), 0);
  EXPECT_EQ(IdempotencyPrune(*ds, kRetention, 100).value(), 0);
  EXPECT_EQ(ds->durable_commits(), before);
}

// Pruning reads the oldest rows through an index: its cost does not grow with the tables.
TEST_F(HistoryTest, ThePruneQueriesReadIndexesNotTables) {
  if (testing::OnPostgres()) {
    GTEST_SKIP() << "reads SQLite's EXPLAIN QUERY PLAN; PostgreSQL's planner chooses by statistics";
  }
  // The statements the prunes and the operators' list of stuck sagas run, as they ran: each
  // prune has something old to delete, so that it gets past its first look.
  testing::StatementTrace trace;
  TempDatastore traced{clock_, {}, testing::TestEngine::kSqlite};
  MakeSagaIn(*traced, SagaState::kDone);
  ASSERT_TRUE(IdempotencyFinish(*traced, Uuid::Random(), "k", "hash", 201, "{}"));
  model::AuditEntry entry;
  entry.id = Uuid::TimeOrdered();
  entry.time_started = clock_->Now();
  entry.time_completed = clock_->Now();
  entry.request_id = "r";
  entry.request_uri = "/v1/projects";
  entry.operation_id = "project_create";
  entry.source_ip = "127.0.0.1";
  entry.result = model::AuditResultKind::kSuccess;
  entry.http_status = 201;
  entry.success_status = 201;
  ASSERT_TRUE(traced->Write<bool>([&](Tx& tx) -> Result<bool> {
    FP_CHECK_OK(AuditFinishIn(tx, entry));
    return true;
  }));
  clock_->Advance(kRetention + kSecond);
  EXPECT_EQ(SagaPruneFinished(*traced, kRetention, 10).value(), 1);
  EXPECT_EQ(IdempotencyPrune(*traced, kRetention, 10).value(), 1);
  EXPECT_EQ(AuditPrune(*traced, kRetention, 10).value(), 1);
  ASSERT_TRUE(SagaListPage(*traced, {.state = SagaState::kStuck}, std::nullopt, 10));

  std::string sagas =
      Plan(trace.Only("SELECT id FROM saga WHERE state IN ('done', 'unwound') AND "
                      "time_modified < ? ORDER BY"));
  EXPECT_NE(sagas.find("INDEX saga_finished"), std::string::npos) << sagas;
  EXPECT_EQ(sagas.find("TEMP B-TREE"), std::string::npos) << sagas;
  std::string keys = Plan(trace.Only("DELETE FROM idempotency_key"));
  EXPECT_NE(keys.find("INDEX idempotency_key_by_age"), std::string::npos) << keys;
  EXPECT_EQ(keys.find("TEMP B-TREE"), std::string::npos) << keys;
  std::string entries = Plan(trace.Only("DELETE FROM audit_log"));
  EXPECT_NE(entries.find("INDEX audit_log_by_completion"), std::string::npos) << entries;
  EXPECT_EQ(entries.find("TEMP B-TREE"), std::string::npos) << entries;
  // And so do their first looks (is anything old enough?).
  for (const auto& [look, index] : std::vector<std::pair<std::string, std::string>>{
           {"SELECT 1 FROM saga WHERE state IN ('done'", "INDEX saga_finished"},
           {"SELECT 1 FROM idempotency_key WHERE", "INDEX idempotency_key_by_age"},
           {"SELECT 1 FROM audit_log WHERE", "INDEX audit_log_by_completion"}}) {
    std::string plan = Plan(trace.Only(look));
    EXPECT_NE(plan.find(index), std::string::npos) << look << ": " << plan;
    EXPECT_EQ(plan.find("TEMP B-TREE"), std::string::npos) << look << ": " << plan;
  }
  // The operators' list of stuck sagas reads its index, not every saga.
  std::string stuck = Plan(trace.Only("FROM saga WHERE 1 = 1"));
  EXPECT_NE(stuck.find("INDEX saga_by_state"), std::string::npos) << stuck;
}

// On PostgreSQL too, the prunes' first look (is anything old enough?) reads an index: planned
// once for any cutoff (a prepared statement's generic plan, from its sixth run), an unordered
// "< ? LIMIT 1" was a sequential scan expected to stop at its first row, which read the whole
// table whenever nothing was old enough: every second, on every server. Seen through the
// predicate lock such a scan holds on its whole table (kept after the read's commit while a
// writable transaction that began before it is open).
TEST_F(HistoryTest, OnPostgresTheLooksForSomethingToPruneReadIndexesNotTables) {
  if (!testing::OnPostgres()) GTEST_SKIP() << "PostgreSQL's generic plans";
  TempDatastore one_connection{clock_, PostgresOptions{.pool_size = 1}};
  Datastore& store = *one_connection;
  // 2,000 recent rows in each table, and statistics that say so.
  ASSERT_TRUE(store.Write<bool>([&](Tx& tx) -> Result<bool> {
    FP_TRY(tx.Exec(
        "INSERT INTO audit_log (id, time_started, time_completed, request_id, request_uri, "
        "operation_id, source_ip, result_kind, http_status, success_status) SELECT 'a' || g, "
        "?, ?, 'r', '/v1/projects', 'project_create', '127.0.0.1', 'success', 201, 201 FROM "
        "generate_series(1, 2000) g",
        tx.now(), tx.now()));
    FP_TRY(
        tx.Exec("INSERT INTO idempotency_key (token_id, key, request_sha256, state, status, body, "
                "time_created) SELECT 't', g::text, 'h', 'done', 201, '{}', ? FROM "
                "generate_series(1, 2000) g",
                tx.now()));
    FP_TRY(tx.Exec(
        "INSERT INTO saga (id, name, dag, state, current_sec, adopt_generation, engine_version, "
        "time_created, time_modified) SELECT 's' || g, 'toy', '{}', 'done', 'sec', 1, 1, ?, ? "
        "FROM generate_series(1, 2000) g",
        tx.now(), tx.now()));
    return true;
  }));
  ASSERT_TRUE(store.Write<bool>([&](Tx& tx) -> Result<bool> {
    FP_TRY(tx.Exec("ANALYZE audit_log"));
    FP_TRY(tx.Exec("ANALYZE idempotency_key"));
    FP_TRY(tx.Exec("ANALYZE saga"));
    return true;
  }));
  auto outside = postgres::PgConnection::Open(one_connection.postgres_url());
  ASSERT_TRUE(outside) << outside.error().message();
  ASSERT_TRUE((*outside)->Run("BEGIN ISOLATION LEVEL SERIALIZABLE"));
  ASSERT_TRUE((*outside)->Run("SELECT 1"));
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(AuditPrune(store, kRetention, 100).value(), 0);
    EXPECT_EQ(IdempotencyPrune(store, kRetention, 100).value(), 0);
    EXPECT_EQ(SagaPruneFinished(store, kRetention, 100).value(), 0);
  }
  // In this database: pg_locks is the cluster's, and other tests run beside this one. Every
  // such lock here is a look's: the setup above reads no table (inserts from generate_series,
  // ANALYZE).
  auto whole = (*outside)->Query(
      "SELECT coalesce(string_agg(relation::regclass::text, ', ' ORDER BY "
      "relation::regclass::text), '') FROM pg_locks WHERE mode = 'SIReadLock' AND locktype = "
      "'relation' AND database = (SELECT oid FROM pg_database WHERE datname = "
      "current_database())",
      {});
  ASSERT_TRUE(whole) << whole.error().message();
  EXPECT_EQ(whole->front().Text(0), "") << "tables read whole";
  ASSERT_TRUE((*outside)->Run("ROLLBACK"));
}

}  // namespace
}  // namespace fp::db
