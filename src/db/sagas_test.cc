// The saga engine's store over the datastore: the store contract, and the engine's database
// actions committing with their log events in one datastore transaction.

#include "db/sagas.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "db/saga_history.h"
#include "db/testing/statement_trace.h"
#include "db/testing/temp_datastore.h"
#include "saga/saga.h"
#include "saga/testing/store_contract.h"

namespace fp::db {
namespace {

using testing::TempDatastore;

struct DatastoreSagaStoreFixture {
  saga::SagaStore& store() { return store_; }
  TempDatastore ds;
  DatastoreSagaStore store_{*ds};
};

}  // namespace
}  // namespace fp::db

namespace fp::saga::testing {
INSTANTIATE_TYPED_TEST_SUITE_P(Datastore, SagaStoreContract, db::DatastoreSagaStoreFixture);
}  // namespace fp::saga::testing

namespace fp::db {
namespace {

using saga::ActionContext;
using saga::Json;

class DatastoreSagaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(ds->Write<bool>([](Tx& tx) -> Result<bool> {
      FP_TRY(tx.Exec("CREATE TABLE toy (saga TEXT, node TEXT, PRIMARY KEY (saga, node))"));
      return true;
    }));
    registry.Add(saga::Action{
        .name = "toy.row",
        .run_in_tx = [](Tx& tx, const ActionContext& ctx) -> Result<Json> {
          FP_TRY(tx.Exec("INSERT INTO toy (saga, node) VALUES (?, ?) ON CONFLICT DO NOTHING",
                         ctx.saga_id(), ctx.node()));
          return Json{{"row", ctx.node()}};
        },
        .undo_in_tx = [](Tx& tx, const ActionContext& ctx) -> Status {
          FP_TRY(tx.Exec("DELETE FROM toy WHERE saga = ? AND node = ?", ctx.saga_id(), ctx.node()));
          return Ok();
        }});
  }

  int64_t ToyRows() {
    return ds
        ->Read<int64_t>([](Tx& tx) -> Result<int64_t> {
          return FP_TRY(tx.QueryRow("SELECT count(*) FROM toy"))->Int(0);
        })
        .value();
  }

  static saga::SagaDag Rows(int n) {
    saga::SagaDag dag;
    dag.name = "rows";
    for (int i = 0; i < n; ++i) dag.nodes.push_back({fmt::format("r{}", i), "toy.row"});
    return dag;
  }

  TempDatastore ds;
  DatastoreSagaStore store{*ds};
  saga::ActionRegistry registry;
  saga::SagaExecutor exec{store, registry, "sec-test", ds->clock(), ds->random()};
};

// The saga row commits with the first database node, and each node's row with its event: one
// durable commit per node, and the rows are there when the saga is.
TEST_F(DatastoreSagaTest, ADatabaseActionCommitsWithItsEventInOneDatastoreTransaction) {
  int64_t before = ds->durable_commits();
  Uuid id = Uuid::Random();
  auto out = exec.Run(id, Rows(3));
  ASSERT_TRUE(out) << out.error().message();
  EXPECT_EQ(out->kind, saga::SagaResultKind::kDone);
  EXPECT_EQ(ds->durable_commits() - before, 3);
  EXPECT_EQ(ToyRows(), 3);
  EXPECT_EQ(SagaLoad(*ds, id)->saga.state, SagaState::kDone);
}

// A database node that fails after its effect rolls the effect back with its transaction, and
// the undo of the nodes before it deletes their rows in the undo's transaction.
TEST_F(DatastoreSagaTest, AFailedDatabaseNodesEffectRollsBackWithItsTransaction) {
  exec.SetFaultPlanForTest(saga::FaultPlan{.fail_node_after_effect = 2});
  Uuid id = Uuid::Random();
  auto out = exec.Run(id, Rows(3));
  ASSERT_TRUE(out) << out.error().message();
  EXPECT_EQ(out->kind, saga::SagaResultKind::kUnwound);
  EXPECT_EQ(ToyRows(), 0);
  EXPECT_EQ(SagaLoad(*ds, id)->saga.state, SagaState::kUnwound);

  // A first node that fails leaves neither its row nor the saga.
  exec.SetFaultPlanForTest(saga::FaultPlan{.fail_node_after_effect = 0});
  Uuid refused = Uuid::Random();
  int64_t before = ds->durable_commits();
  ASSERT_TRUE(exec.Run(refused, Rows(2)));
  EXPECT_EQ(ds->durable_commits(), before);
  EXPECT_EQ(ToyRows(), 0);
  EXPECT_EQ(SagaLoad(*ds, refused).error().kind(), ErrorKind::kNotFound);
}

// A plan's own exit (the simulation's throw) inside a database node's transaction: the
// engine's write lane would turn a throw into the write's error (and the saga would unwind), so
// the exit runs once the transaction rolled back. The server stops there: the caller sees the
// throw, nothing of the node committed (its row nor its event), and recovery runs it again.
TEST_F(DatastoreSagaTest, AnExitInsideADatabaseNodeStopsTheServerWithNothingOfItCommitted) {
  struct ServerStopped {};
  saga::FaultPlan plan{.exit_in_node = 1};
  plan.exit = [] { throw ServerStopped{}; };
  exec.SetFaultPlanForTest(plan);
  Uuid id = Uuid::Random();
  EXPECT_THROW((void)exec.Run(id, Rows(3)), ServerStopped);
  EXPECT_EQ(ToyRows(), 1);  // r0's
  auto log = SagaLoad(*ds, id);
  ASSERT_TRUE(log) << log.error().message();
  EXPECT_EQ(log->saga.state, SagaState::kRunning);
  for (const saga::SagaEvent& e : log->events) EXPECT_EQ(e.node_index, 0) << "node 1's event";

  // The server started again (an executor of the same id) finishes it.
  saga::SagaExecutor restarted{store, registry, "sec-test", ds->clock(), ds->random()};
  auto resumed = restarted.Resume(id);
  ASSERT_TRUE(resumed) << resumed.error().message();
  EXPECT_EQ(resumed->kind, saga::SagaResultKind::kDone);
  EXPECT_EQ(SagaLoad(*ds, id)->saga.state, SagaState::kDone);
  EXPECT_EQ(ToyRows(), 3);
}

// The events of one transaction go in one statement, and where the transaction writes the
// saga's row (the insert that creates it, the update to its new state) without a look of their
// own at the owner: an attach's two transactions write three events in two plain inserts.
TEST_F(DatastoreSagaTest, ATransactionsEventsAreOneInsertWhereTheSagasRowChecksTheOwner) {
  testing::StatementTrace trace;
  TempDatastore traced{std::make_shared<SystemClock>(), {}, testing::TestEngine::kSqlite};
  DatastoreSagaStore traced_store{*traced};
  ASSERT_TRUE(traced->Write<bool>([](Tx& tx) -> Result<bool> {
    FP_TRY(tx.Exec("CREATE TABLE toy (saga TEXT, node TEXT, PRIMARY KEY (saga, node))"));
    return true;
  }));
  registry.Add(saga::Action{.name = "toy.unlogged",
                            .run = [](const ActionContext&) -> Result<Json> {
                              return Json{{"told", true}};
                            },
                            .unlogged = true});
  saga::SagaExecutor traced_exec{traced_store, registry, "sec-test", traced->clock(),
                                 traced->random()};
  saga::SagaDag dag = Rows(1);
  dag.nodes.push_back({"told", "toy.unlogged"});
  dag.nodes.push_back({"r1", "toy.row"});
  int64_t before = traced->durable_commits();
  Uuid id = Uuid::Random();
  auto out = traced_exec.Run(id, dag);
  ASSERT_TRUE(out) << out.error().message();
  EXPECT_EQ(out->kind, saga::SagaResultKind::kDone);
  EXPECT_EQ(traced->durable_commits() - before, 2);
  auto log = SagaLoad(*traced, id);
  ASSERT_TRUE(log) << log.error().message();
  ASSERT_EQ(log->events.size(), 3u);
  EXPECT_EQ(log->events[1].data, R"({"told":true})");

  std::vector<std::string> inserts;
  for (const std::string& text : trace.texts()) {
    if (text.find("INSERT INTO saga_node_event") != std::string::npos) inserts.push_back(text);
  }
  ASSERT_EQ(inserts.size(), 2u);  // one row (r0's), two rows (told's and r1's)
  int of_two_rows = 0;
  for (const std::string& text : inserts) {
    EXPECT_EQ(text.find("EXISTS"), std::string::npos) << text;
    of_two_rows += text.find("), (") != std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(of_two_rows, 1);
}

// A done saga's result is its last node's output, which that node's event already holds: the
// row keeps NULL instead of a second copy, and every reader gets the output all the same. A
// result the last event does not hold (and a row written before) is kept as it is.
TEST_F(DatastoreSagaTest, ADoneSagasRowKeepsNoSecondCopyOfItsLastNodesOutput) {
  auto stored = [&](const Uuid& id) {
    return ds
        ->Read<std::optional<std::string>>([&](Tx& tx) -> Result<std::optional<std::string>> {
          return FP_TRY(tx.QueryRow("SELECT result FROM saga WHERE id = ?", id))->OptText(0);
        })
        .value();
  };
  auto read_back = [&](const Uuid& id, const std::string& want) {
    auto log = SagaLoad(*ds, id);
    ASSERT_TRUE(log) << log.error().message();
    EXPECT_EQ(log->saga.result, want);
    auto explained = SagaExplain(*ds, id);
    ASSERT_TRUE(explained) << explained.error().message();
    EXPECT_EQ(explained->result, want);
  };

  // The last node runs in the database's transaction (an attach's and a detach's shape).
  Uuid in_tx = Uuid::Random();
  auto out = exec.Run(in_tx, Rows(3));
  ASSERT_TRUE(out) << out.error().message();
  ASSERT_EQ(out->kind, saga::SagaResultKind::kDone);
  EXPECT_EQ(stored(in_tx), std::nullopt);
  read_back(in_tx, R"({"row":"r2"})");

  // The last node calls out and is logged after (its event and the state in one record).
  registry.Add(saga::Action{.name = "toy.call", .run = [](const ActionContext&) -> Result<Json> {
                              return Json{{"called", 1}};
                            }});
  saga::SagaDag dag = Rows(1);
  dag.nodes.push_back({"call", "toy.call"});
  Uuid called = Uuid::Random();
  out = exec.Run(called, dag);
  ASSERT_TRUE(out) << out.error().message();
  ASSERT_EQ(out->kind, saga::SagaResultKind::kDone);
  EXPECT_EQ(stored(called), std::nullopt);
  read_back(called, R"({"called":1})");

  // A result other than the event's data is the row's.
  Uuid other = Uuid::Random();
  SagaRow row{.id = other,
              .name = "rows",
              .dag = Rows(1).ToText(),
              .state = SagaState::kRunning,
              .owner = {"sec-test", 1},
              .engine_version = 1};
  ASSERT_TRUE(store.Create(row));
  ASSERT_TRUE(store.Record(other, row.owner, SagaEvent{0, saga::SagaEventType::kSucceeded, "1"},
                           SagaState::kDone, std::string("2")));
  EXPECT_EQ(stored(other), "2");
  read_back(other, "2");

  // A row written before kept its copy: read as it is.
  ASSERT_TRUE(ds->Write<bool>([&](Tx& tx) -> Result<bool> {
    FP_TRY(tx.Exec("UPDATE saga SET result = ? WHERE id = ?", R"({"row":"kept"})", in_tx));
    return true;
  }));
  read_back(in_tx, R"({"row":"kept"})");
}

}  // namespace
}  // namespace fp::db
