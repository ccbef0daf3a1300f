// The saga engine on a toy saga: output passing, unwind order, stuck on a failed undo, fault
// injection, durable commit counts, and recovery from every possible prefix of the log.

#include "saga/saga.h"

#include <gtest/gtest.h>

#include <set>

#include "common/mutex.h"
#include "saga/testing/memory_store.h"

namespace fp::saga {
namespace {

using testing::MemoryStore;

// The toy saga's "outside world": a set of keys (idempotent put/remove) and a journal of
// every call, in order.
struct World {
  Mutex mu;
  std::set<std::string> keys FP_GUARDED_BY(mu);
  std::vector<std::string> journal FP_GUARDED_BY(mu);

  void Put(const std::string& k) {
    MutexLock l(mu);
    keys.insert(k);
    journal.push_back("do " + k);
  }
  void Remove(const std::string& k) {
    MutexLock l(mu);
    keys.erase(k);
    journal.push_back("undo " + k);
  }
  // Copies, for the tests to look at.
  std::set<std::string> Keys() {
    MutexLock l(mu);
    return keys;
  }
  std::vector<std::string> Journal() {
    MutexLock l(mu);
    return journal;
  }
  void Clear() {
    MutexLock l(mu);
    keys.clear();
    journal.clear();
  }
  // The keys alone, not journalled: the world as a crashed run left it.
  void InsertKey(const std::string& k) {
    MutexLock l(mu);
    keys.insert(k);
  }
  void EraseKey(const std::string& k) {
    MutexLock l(mu);
    keys.erase(k);
  }
};

// The row toy.row writes, in the store's transaction, for node `node` of saga `saga`.
std::string ToyRow(const Uuid& saga, const std::string& node) {
  return saga.ToString() + "/" + node;
}

// Actions: toy.new_id records a fresh random id; toy.put puts "<node>:<id>" in the world;
// toy.row inserts a row in the store's transaction, with its log event.
ActionRegistry ToyRegistry(World& world) {
  ActionRegistry r;
  r.Add(Action{.name = "toy.new_id", .run = [](const ActionContext&) -> Result<Json> {
                 return Json{{"id", Uuid::Random().ToString()}};
               }});
  r.Add(Action{.name = "toy.put",
               .run = [&world](const ActionContext& ctx) -> Result<Json> {
                 const Json& id = *FP_TRY(ctx.Output("new_id"));
                 std::string key = ctx.node() + ":" + id["id"].get<std::string>();
                 world.Put(key);
                 return Json{{"key", key}};
               },
               .undo = [&world](const ActionContext& ctx) -> Status {
                 const Json& id = *FP_TRY(ctx.Output("new_id"));
                 world.Remove(ctx.node() + ":" + id["id"].get<std::string>());
                 return Ok();
               }});
  r.Add(Action{.name = "toy.put_unlogged",
               .run = [&world](const ActionContext& ctx) -> Result<Json> {
                 const Json& id = *FP_TRY(ctx.Output("new_id"));
                 world.Put(ctx.node() + ":" + id["id"].get<std::string>());
                 return Json::object();
               },
               .undo = [&world](const ActionContext& ctx) -> Status {
                 const Json& id = *FP_TRY(ctx.Output("new_id"));
                 world.Remove(ctx.node() + ":" + id["id"].get<std::string>());
                 return Ok();
               },
               .unlogged = true});
  r.Add(Action{.name = "toy.row",
               .run_in_tx = [](MemoryStore::Tx& tx, const ActionContext& ctx) -> Result<Json> {
                 tx.rows().insert(ToyRow(ctx.saga_id(), ctx.node()));
                 return Json{{"row", ctx.node()}};
               },
               .undo_in_tx = [](MemoryStore::Tx& tx, const ActionContext& ctx) -> Status {
                 tx.rows().erase(ToyRow(ctx.saga_id(), ctx.node()));
                 return Ok();
               }});
  r.Add(Action{.name = "toy.queued_row",
               .run_in_tx = [](MemoryStore::Tx& tx, const ActionContext& ctx) -> Result<Json> {
                 tx.rows().insert(ToyRow(ctx.saga_id(), ctx.node()));
                 return Json{{"row", ctx.node()}};
               },
               .joins_write_queue = true});
  return r;
}

SagaDag ToyDag() {
  SagaDag dag;
  dag.name = "toy";
  dag.params = Json{{"p", 1}};
  dag.nodes = {{"new_id", "toy.new_id"},
               {"a", "toy.put"},
               {"row", "toy.row"},
               {"b", "toy.put"},
               {"c", "toy.put"}};
  return dag;
}

class SagaTest : public ::testing::Test {
 protected:
  int64_t ToyRows() { return static_cast<int64_t>(store.rows().size()); }

  SagaState StateOf(const Uuid& id) { return store.Load(id)->saga.state; }

  MemoryStore store;
  World world;
  ActionRegistry registry = ToyRegistry(world);
  SystemClock clock;
  SystemRandom random;
  SagaExecutor exec{store, registry, "sec-test", clock, random};
};

// What a request's saga records of it: its id, also at hand for the request's own run.
class RequestOrigin final : public SagaOrigin {
 public:
  explicit RequestOrigin(std::string id) : id_(std::move(id)) {}
  Status RecordIn(StoreTx&, const Uuid&) const override { return Ok(); }
  std::optional<std::string> Describe() const override { return Json{{"request_id", id_}}.dump(); }
  std::string_view request_id() const override { return id_; }

 private:
  std::string id_;
};

TEST_F(SagaTest, EveryNodeOfARunByItsRequestHasTheRequestsIdAndOrigin) {
  std::vector<std::pair<std::string, std::string>> seen;
  ActionRegistry r;
  r.Add(Action{.name = "toy.seen", .run = [&seen](const ActionContext& ctx) -> Result<Json> {
                 seen.emplace_back(ctx.request_id(), ctx.origin());
                 return Json::object();
               }});
  // A first node in the store's transaction (the saga created with it, as an attach's is).
  r.Add(Action{.name = "toy.seen_in_tx",
               .run_in_tx = [&seen](MemoryStore::Tx&, const ActionContext& ctx) -> Result<Json> {
                 seen.emplace_back(ctx.request_id(), ctx.origin());
                 return Json::object();
               }});
  SagaExecutor exec_seen{store, r, "sec-test", clock, random};
  const std::pair<std::string, std::string> by_request{"req-7", R"({"request_id":"req-7"})"};
  for (const char* first : {"toy.seen", "toy.seen_in_tx"}) {
    SagaDag dag{
        .name = "seen", .params = Json::object(), .nodes = {{"a", first}, {"b", "toy.seen"}}};
    seen.clear();
    RequestOrigin origin("req-7");
    ASSERT_TRUE(exec_seen.RunNew(dag, &origin));
    EXPECT_EQ(seen, (std::vector{by_request, by_request})) << first;
    seen.clear();
    ASSERT_TRUE(exec_seen.RunNew(dag));
    EXPECT_EQ(seen, (std::vector<std::pair<std::string, std::string>>{{"", ""}, {"", ""}}))
        << first;
  }
}

// A starter's check runs in the transaction that would create the saga, first: refusing, its
// error is RunNew's and nothing of the saga (nor of the check) is written, counted or left to
// recovery; passing, the saga runs with the params as the check completed them, and is written
// so. Only for a first node in the store's transaction (an attach's): Internal otherwise.
TEST_F(SagaTest, ACreateChecksErrorRefusesTheSagaWithNothingWritten) {
  int left_unfinished = 0;
  exec.SetLeftUnfinishedHook([&] { ++left_unfinished; });
  ActionRegistry r = ToyRegistry(world);
  std::vector<Json> seen_params;
  r.Add(Action{.name = "toy.params",
               .run_in_tx = [&](MemoryStore::Tx&, const ActionContext& ctx) -> Result<Json> {
                 seen_params.push_back(ctx.params());
                 return Json::object();
               }});
  SagaExecutor checked_exec{store, r, "sec-test", clock, random};
  checked_exec.SetLeftUnfinishedHook([&] { ++left_unfinished; });
  SagaDag dag{.name = "checked",
              .params = Json{{"who", nullptr}},
              .nodes = {{"first", "toy.params"}, {"row", "toy.row"}}};
  bool refuse = true;
  int runs = 0;
  const CreateCheck check = [&](StoreTx& stx, Json& params) -> Status {
    ++runs;
    static_cast<MemoryStore::Tx&>(stx).rows().insert("checked");
    if (refuse) return Fail(Error::InvalidRequest("refused by the check"));
    params["who"] = "found by the check";
    return Ok();
  };
  auto refused = checked_exec.RunNew(dag, nullptr, &check);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().kind(), ErrorKind::kInvalidRequest);
  EXPECT_EQ(refused.error().message(), "refused by the check");
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(ToyRows(), 0);
  EXPECT_TRUE(seen_params.empty());
  EXPECT_EQ(checked_exec.CountsByName()["checked"].started, 0);
  ASSERT_TRUE(checked_exec.ListUnfinished()->empty());

  refuse = false;
  auto done = checked_exec.RunNew(dag, nullptr, &check);
  ASSERT_TRUE(done) << done.error().message();
  EXPECT_EQ(done->kind, SagaResultKind::kDone);
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(store.rows().count("checked"), 1u);
  EXPECT_EQ(ToyRows(), 2);  // the check's and the second node's
  ASSERT_EQ(seen_params.size(), 1u);
  EXPECT_EQ(seen_params[0], (Json{{"who", "found by the check"}}));
  EXPECT_EQ(checked_exec.CountsByName()["checked"].started, 1);
  std::vector<Uuid> sagas;
  for (const std::string& row : store.rows()) {
    if (row != "checked") sagas.push_back(*Uuid::Parse(row.substr(0, row.find('/'))));
  }
  ASSERT_EQ(sagas.size(), 1u);
  auto log = store.Load(sagas[0]);
  ASSERT_TRUE(log) << log.error().message();
  EXPECT_EQ(Json::parse(log->saga.dag)["params"], (Json{{"who", "found by the check"}}));
  EXPECT_EQ(left_unfinished, 0);

  // A first node outside the store's transaction: nothing to run the check in.
  SagaDag outside{.name = "outside", .params = Json::object(), .nodes = {{"new_id", "toy.new_id"}}};
  auto unsupported = checked_exec.RunNew(outside, nullptr, &check);
  ASSERT_FALSE(unsupported);
  EXPECT_EQ(unsupported.error().kind(), ErrorKind::kInternal);
  EXPECT_EQ(runs, 2);
}

// A MemoryStore whose next Write answers `fail_next` whatever its body did, with nothing of
// it kept: a COMMIT that failed after the body ran.
class CommitFailingStore final : public SagaStore {
 public:
  explicit CommitFailingStore(MemoryStore& inner) : inner_(inner) {}
  std::optional<Error> fail_next;

  Status Write(const std::function<Status(StoreTx&)>& body) override {
    if (!fail_next) return inner_.Write(body);
    Error failed = *fail_next;
    fail_next.reset();
    (void)inner_.Write([&](StoreTx& tx) -> Status {
      FP_CHECK_OK(body(tx));
      return Fail(failed);  // rolled back
    });
    return Fail(failed);
  }
  Result<bool> CreateIn(StoreTx& tx, const SagaRow& row, const SagaOrigin* origin) override {
    return inner_.CreateIn(tx, row, origin);
  }
  Status RecordIn(StoreTx& tx, const Uuid& saga_id, const SagaOwner& owner,
                  const std::optional<SagaEvent>& event, std::optional<SagaState> new_state,
                  const std::optional<std::string>& result) override {
    return inner_.RecordIn(tx, saga_id, owner, event, new_state, result);
  }
  Result<SagaLog> Load(const Uuid& id) override { return inner_.Load(id); }
  Result<std::vector<OwnedSaga>> ListUnfinished(const std::string& sec) override {
    return inner_.ListUnfinished(sec);
  }
  Result<std::optional<int64_t>> Claim(const Uuid& id, const SagaOwner& owner) override {
    return inner_.Claim(id, owner);
  }
  Result<bool> MarkStuck(const Uuid& id, const SagaOwner& owner,
                         const std::string& result) override {
    return inner_.MarkStuck(id, owner, result);
  }

 private:
  MemoryStore& inner_;
};

// A check's refusal answers only when the store returned it: a transaction that failed after
// the check (its COMMIT) is the store's failure, as for any first node, and what the check
// read may not have been kept. The saga was not written; its start and outcome are counted.
TEST_F(SagaTest, ACreateChecksRefusalYieldsToTheStoresOwnFailure) {
  CommitFailingStore failing(store);
  SagaExecutor failing_exec{failing, registry, "sec-test", clock, random};
  SagaDag dag{.name = "checked", .params = Json::object(), .nodes = {{"row", "toy.row"}}};
  const CreateCheck refuse = [](StoreTx&, Json&) -> Status {
    return Fail(Error::InvalidRequest("refused by the check"));
  };
  failing.fail_next = Error::Unavailable("the commit failed");
  auto out = failing_exec.RunNew(dag, nullptr, &refuse);
  ASSERT_TRUE(out) << out.error().message();
  EXPECT_EQ(out->kind, SagaResultKind::kUnwound);
  ASSERT_TRUE(out->error);
  EXPECT_EQ(out->error->kind(), ErrorKind::kServiceUnavailable);
  EXPECT_EQ(ToyRows(), 0);
  EXPECT_EQ(failing_exec.CountsByName()["checked"].started, 1);
  EXPECT_EQ(failing_exec.CountsByName()["checked"].unwound, 1);

  // Returned as it was, the refusal is the answer.
  auto refused = failing_exec.RunNew(dag, nullptr, &refuse);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message(), "refused by the check");
  EXPECT_EQ(failing_exec.CountsByName()["checked"].started, 1);
}

TEST_F(SagaTest, NodesShareValuesThroughRecordedOutputs) {
  Uuid id = Uuid::Random();
  auto out = exec.Run(id, ToyDag());
  ASSERT_TRUE(out) << out.error().message();
  EXPECT_EQ(out->kind, SagaResultKind::kDone);
  auto log = store.Load(id).value();
  std::string new_id;
  for (const auto& e : log.events) {
    if (e.node_index == 0 && e.type == SagaEventType::kSucceeded) {
      new_id = Json::parse(*e.data)["id"].get<std::string>();
    }
  }
  ASSERT_FALSE(new_id.empty());
  EXPECT_EQ(world.Keys(), (std::set<std::string>{"a:" + new_id, "b:" + new_id, "c:" + new_id}));
  EXPECT_EQ(out->output["key"], "c:" + new_id);
  EXPECT_EQ(ToyRows(), 1);
  EXPECT_EQ(StateOf(id), SagaState::kDone);
  // The last node's output is both its event's data and the saga's result, in the log.
  const SagaEvent& last = log.events.back();
  ASSERT_EQ(last.node_index, 4);
  ASSERT_EQ(last.type, SagaEventType::kSucceeded);
  ASSERT_TRUE(last.data.has_value());
  EXPECT_EQ(Json::parse(*last.data, nullptr, false), out->output) << *last.data;
  ASSERT_TRUE(log.saga.result.has_value());
  EXPECT_EQ(Json::parse(*log.saga.result, nullptr, false), out->output);
}

TEST_F(SagaTest, FailureUnwindsCompletedNodesInReverseOrder) {
  exec.SetFaultPlanForTest(FaultPlan{.fail_node = 4});
  Uuid id = Uuid::Random();
  auto out = exec.Run(id, ToyDag());
  ASSERT_TRUE(out) << out.error().message();
  EXPECT_EQ(out->kind, SagaResultKind::kUnwound);
  EXPECT_EQ(out->failed_node, 4);
  EXPECT_NE(out->error->message().find("injected failure at node 4"), std::string::npos);
  ASSERT_EQ(world.Journal().size(), 4u);
  EXPECT_EQ(world.Journal()[0].substr(0, 4), "do a");
  EXPECT_EQ(world.Journal()[1].substr(0, 4), "do b");
  EXPECT_EQ(world.Journal()[2].substr(0, 6), "undo b");
  EXPECT_EQ(world.Journal()[3].substr(0, 6), "undo a");
  EXPECT_TRUE(world.Keys().empty());
  EXPECT_EQ(ToyRows(), 0);
  EXPECT_EQ(StateOf(id), SagaState::kUnwound);
}

// saga.h's promise: a failed node is never undone; the nodes before it are. So the effect of an
// action that fails after applying it stays unless the action takes it back itself, except for
// a database action, whose effect rolls back with the transaction that records its failure.
TEST_F(SagaTest, AFailedNodeIsNeverUndoneAndADatabaseNodesEffectRollsBack) {
  exec.SetFaultPlanForTest(FaultPlan{.fail_node_after_effect = 4});
  auto out = exec.Run(Uuid::Random(), ToyDag());
  ASSERT_TRUE(out) << out.error().message();
  EXPECT_EQ(out->kind, SagaResultKind::kUnwound);
  EXPECT_EQ(out->failed_node, 4);
  EXPECT_NE(out->error->message().find("injected failure after the effect of node 4"),
            std::string::npos);
  ASSERT_EQ(world.Journal().size(), 5u);
  EXPECT_EQ(world.Journal()[2].substr(0, 4), "do c");
  EXPECT_EQ(world.Journal()[3].substr(0, 6), "undo b");  // not "undo c"
  EXPECT_EQ(world.Journal()[4].substr(0, 6), "undo a");
  ASSERT_EQ(world.Keys().size(), 1u);
  EXPECT_EQ(world.Keys().begin()->substr(0, 2), "c:");
  EXPECT_EQ(ToyRows(), 0);

  world.Clear();
  exec.SetFaultPlanForTest(FaultPlan{.fail_node_after_effect = 2});  // the database node
  out = exec.Run(Uuid::Random(), ToyDag());
  ASSERT_TRUE(out) << out.error().message();
  EXPECT_EQ(out->kind, SagaResultKind::kUnwound);
  EXPECT_EQ(ToyRows(), 0) << "the failed database node's row was committed";
  EXPECT_TRUE(world.Keys().empty());
}

TEST_F(SagaTest, FailedUndoLeavesTheSagaStuckNeverDone) {
  exec.SetFaultPlanForTest(FaultPlan{.fail_node = 4, .fail_undo_node = 2});
  Uuid id = Uuid::Random();
  auto out = exec.Run(id, ToyDag());
  ASSERT_TRUE(out);
  EXPECT_EQ(out->kind, SagaResultKind::kStuck);
  EXPECT_EQ(out->failed_node, 2);
  EXPECT_EQ(StateOf(id), SagaState::kStuck);
  // Node b was undone, the row's undo failed, and node a was left alone for a human.
  EXPECT_EQ(world.Keys().size(), 1u);
  EXPECT_EQ(ToyRows(), 1);
  // Resuming a stuck saga does not pretend it finished.
  exec.SetFaultPlanForTest(std::nullopt);
  auto again = exec.Resume(id);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->kind, SagaResultKind::kStuck);
  EXPECT_EQ(StateOf(id), SagaState::kStuck);
}

TEST_F(SagaTest, EveryActionRunTwiceGivesTheSameResult) {
  exec.SetFaultPlanForTest(FaultPlan{.repeat_every_action = true});
  auto out = exec.Run(Uuid::Random(), ToyDag());
  ASSERT_TRUE(out);
  EXPECT_EQ(out->kind, SagaResultKind::kDone);
  EXPECT_EQ(world.Keys().size(), 3u);
  EXPECT_EQ(ToyRows(), 1);
}

TEST_F(SagaTest, UndoRunTwiceStillUnwindsCleanly) {
  for (int fail = 1; fail < 5; ++fail) {
    exec.SetFaultPlanForTest(FaultPlan{.fail_node = fail, .repeat_undo_node = fail - 1});
    auto out = exec.Run(Uuid::Random(), ToyDag());
    ASSERT_TRUE(out);
    EXPECT_EQ(out->kind, SagaResultKind::kUnwound) << "fail at " << fail;
    EXPECT_TRUE(world.Keys().empty()) << "fail at " << fail;
    EXPECT_EQ(ToyRows(), 0) << "fail at " << fail;
  }
}

TEST_F(SagaTest, DatabaseActionsCommitEffectAndEventTogether) {
  SagaDag dag;
  dag.name = "rows";
  dag.nodes = {{"r1", "toy.row"}, {"r2", "toy.row"}};
  int64_t before = store.commits();
  auto out = exec.Run(Uuid::Random(), dag);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->kind, SagaResultKind::kDone);
  // The saga row commits with the first node; each database node is one commit (the last also
  // marks the saga done).
  EXPECT_EQ(store.commits() - before, 2);
}

// A node whose action asks for the write queue has its own transaction join it (before it
// writes anything: the saga's first transaction too), and no other node's.
TEST_F(SagaTest, ADatabaseNodeThatAsksForTheWriteQueueJoinsItInItsTransactionOnly) {
  SagaDag dag;
  dag.name = "rows";
  dag.nodes = {{"q1", "toy.queued_row"}, {"r", "toy.row"}, {"q2", "toy.queued_row"}};
  auto out = exec.Run(Uuid::Random(), dag);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->kind, SagaResultKind::kDone);
  EXPECT_EQ(store.write_queue_joins(), 2);
}

TEST_F(SagaTest, UnloggedActionsRideOnTheNextCommit) {
  SagaDag dag;
  dag.name = "mixed";
  dag.nodes = {
      {"new_id", "toy.new_id"}, {"r1", "toy.row"}, {"a", "toy.put_unlogged"}, {"r2", "toy.row"}};
  int64_t before = store.commits();
  int64_t records_before = store.records();
  Uuid id = Uuid::Random();
  auto out = exec.Run(id, dag);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->kind, SagaResultKind::kDone);
  // create, new_id started, new_id succeeded, r1, r2 (+ a's succeeded): five commits, and a's
  // event is in r2's record (one statement in the datastore), not one of its own.
  EXPECT_EQ(store.commits() - before, 5);
  EXPECT_EQ(store.records() - records_before, 4);
  EXPECT_EQ(world.Keys().size(), 1u);
  // The unlogged node's success is in the log all the same.
  int succeeded = 0;
  auto log = store.Load(id);
  for (const auto& e : log->events) {
    succeeded += e.type == SagaEventType::kSucceeded ? 1 : 0;
  }
  EXPECT_EQ(succeeded, 4);

  // Followed by a node that logs its start: a's event goes in the same commit as that start.
  dag.nodes = {{"new_id", "toy.new_id"}, {"a", "toy.put_unlogged"}, {"b", "toy.put"}};
  before = store.commits();
  Uuid second = Uuid::Random();
  out = exec.Run(second, dag);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->kind, SagaResultKind::kDone);
  // create, new_id started, new_id succeeded, b started (+ a's succeeded), b succeeded.
  EXPECT_EQ(store.commits() - before, 5);
  EXPECT_EQ(store.Load(second)->events.size(), 5u);
}

// A first database node that fails (a refused operation: a name in use, an address held
// elsewhere) rolled back the saga row with it: nothing happened, so nothing is written, and
// refused requests do not fill the saga tables.
TEST_F(SagaTest, AFailingFirstDatabaseNodeWritesNoSaga) {
  exec.SetFaultPlanForTest(FaultPlan{.fail_node = 0});
  SagaDag dag;
  dag.name = "rows";
  dag.nodes = {{"r1", "toy.row"}, {"r2", "toy.row"}};
  Uuid id = Uuid::Random();
  int64_t before = store.commits();
  auto out = exec.Run(id, dag);
  ASSERT_TRUE(out) << out.error().message();
  EXPECT_EQ(out->kind, SagaResultKind::kUnwound);
  EXPECT_EQ(out->failed_node, 0);
  ASSERT_TRUE(out->error);
  EXPECT_NE(out->error->message().find("injected failure at node 0"), std::string::npos);
  EXPECT_EQ(store.commits(), before);
  auto log = store.Load(id);
  ASSERT_FALSE(log);
  EXPECT_EQ(log.error().kind(), ErrorKind::kNotFound);
  EXPECT_EQ(ToyRows(), 0);

  // A later node's failure is history: the saga is written and unwound.
  exec.SetFaultPlanForTest(FaultPlan{.fail_node = 1});
  Uuid second = Uuid::Random();
  auto unwound = exec.Run(second, dag);
  ASSERT_TRUE(unwound) << unwound.error().message();
  EXPECT_EQ(unwound->kind, SagaResultKind::kUnwound);
  EXPECT_EQ(StateOf(second), SagaState::kUnwound);
  EXPECT_EQ(ToyRows(), 0);
}

TEST_F(SagaTest, ASagaRunsOnceAndItsOutcomeIsRemembered) {
  Uuid id = Uuid::Random();
  auto first = exec.Run(id, ToyDag());
  size_t calls = world.Journal().size();
  auto second = exec.Run(id, ToyDag());  // the same id: an idempotent retry
  ASSERT_TRUE(second);
  EXPECT_EQ(second->kind, SagaResultKind::kDone);
  EXPECT_EQ(second->output, first->output);
  EXPECT_EQ(world.Journal().size(), calls);
}

TEST_F(SagaTest, CorruptLogIsRefusedNotReplayed) {
  Uuid id = Uuid::Random();
  SagaRow row{id, "toy", ToyDag().ToText(), SagaState::kRunning, SagaOwner{"sec-test", 1}};
  ASSERT_TRUE(store.Create(row));
  // "undo_finished" for a node that never ran is not a legal sequence.
  ASSERT_TRUE(store.Record(id, row.owner, SagaEvent{1, SagaEventType::kUndoStarted, std::nullopt},
                           std::nullopt, std::nullopt));
  auto out = exec.Resume(id);
  ASSERT_FALSE(out);
  EXPECT_NE(out.error().message().find("illegal event"), std::string::npos);
  EXPECT_TRUE(world.Journal().empty());
}

TEST_F(SagaTest, WritesFromAnExecutorThatLostOwnershipAreFenced) {
  Uuid id = Uuid::Random();
  SagaRow row{id, "toy", ToyDag().ToText(), SagaState::kRunning, SagaOwner{"someone-else", 3}};
  ASSERT_TRUE(store.Create(row));
  auto out = exec.Resume(id);  // the log names another owner: this executor must not write
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().kind(), ErrorKind::kServiceUnavailable);
  EXPECT_TRUE(store.Load(id)->events.empty());
}

// Runs the saga once with `plan`, then for every prefix of its log: a fresh store holding
// only that prefix (as a crash right after those writes would leave it), recovered to rest.
void CheckRecoveryFromEveryPrefix(std::optional<FaultPlan> plan, SagaResultKind expected) {
  SystemClock clock;
  SystemRandom random;
  std::vector<SagaEvent> events;
  {
    MemoryStore store;
    World world;
    ActionRegistry registry = ToyRegistry(world);
    SagaExecutor exec(store, registry, "sec-test", clock, random);
    exec.SetFaultPlanForTest(plan);
    Uuid id = Uuid::Random();
    auto out = exec.Run(id, ToyDag());
    ASSERT_TRUE(out);
    ASSERT_EQ(out->kind, expected);
    events = store.Load(id)->events;
  }
  ASSERT_GE(events.size(), 5u);
  for (size_t k = 0; k <= events.size(); ++k) {
    SCOPED_TRACE("log prefix of " + std::to_string(k) + " events");
    MemoryStore store;
    World world;
    ActionRegistry registry = ToyRegistry(world);
    SagaExecutor exec(store, registry, "sec-test", clock, random);
    Uuid id = Uuid::Random();
    SagaRow row{id, "toy", ToyDag().ToText(), SagaState::kRunning, SagaOwner{"sec-test", 1}};
    ASSERT_TRUE(store.Create(row));
    std::string recorded_id;
    bool row_done = false;
    for (size_t e = 0; e < k; ++e) {
      const auto& ev = events[e];
      ASSERT_TRUE(store.Record(id, row.owner, ev, std::nullopt, std::nullopt));
      if (ev.node_index == 0 && ev.type == SagaEventType::kSucceeded) {
        recorded_id = Json::parse(*ev.data)["id"].get<std::string>();
      }
      // The world as the crashed run left it: a put node's key exists once it succeeded and
      // is gone once its undo finished.
      const std::string node = ToyDag().nodes[static_cast<size_t>(ev.node_index)].name;
      if (node == "a" || node == "b" || node == "c") {
        if (ev.type == SagaEventType::kSucceeded) world.InsertKey(node + ":" + recorded_id);
        if (ev.type == SagaEventType::kUndoFinished) world.EraseKey(node + ":" + recorded_id);
      }
      // The toy row's effect commits with its event; mirror that in the prefix.
      if (ev.node_index == 2) {
        row_done = ev.type == SagaEventType::kSucceeded;
        if (ev.type == SagaEventType::kSucceeded || ev.type == SagaEventType::kUndoFinished) {
          store.SetRows(row_done ? std::set<std::string>{ToyRow(id, "row")}
                                 : std::set<std::string>{});
        }
      }
    }
    exec.SetFaultPlanForTest(plan);
    // Through RecoverAll, as a restarted server does: the log alone decides the direction
    // (forward unless it says unwinding; sagas-and-reliability.md A3).
    auto recovered = exec.RecoverAll();
    ASSERT_TRUE(recovered) << recovered.error().message();
    ASSERT_EQ(recovered->size(), 1u);
    EXPECT_EQ(recovered->front().first, id);
    EXPECT_EQ(recovered->front().second.kind, expected);
    auto rows = static_cast<int64_t>(store.rows().size());
    auto final_log = store.Load(id).value();
    std::string final_id;
    for (const auto& ev : final_log.events) {
      if (ev.node_index == 0 && ev.type == SagaEventType::kSucceeded) {
        final_id = Json::parse(*ev.data)["id"].get<std::string>();
      }
    }
    if (!recorded_id.empty()) {
      EXPECT_EQ(final_id, recorded_id) << "a recorded output changed";
    }
    if (expected == SagaResultKind::kDone) {
      EXPECT_EQ(world.Keys(),
                (std::set<std::string>{"a:" + final_id, "b:" + final_id, "c:" + final_id}));
      EXPECT_EQ(rows, 1);
      EXPECT_EQ(final_log.saga.state, SagaState::kDone);
    } else {
      EXPECT_TRUE(world.Keys().empty());
      EXPECT_EQ(rows, 0);
      EXPECT_EQ(final_log.saga.state, SagaState::kUnwound);
    }
  }
}

TEST(SagaRecovery, CompletesFromEveryPrefixOfASuccessfulLog) {
  CheckRecoveryFromEveryPrefix(std::nullopt, SagaResultKind::kDone);
}

TEST(SagaRecovery, UnwindsFromEveryPrefixOfAnUnwindingLog) {
  CheckRecoveryFromEveryPrefix(FaultPlan{.fail_node = 4}, SagaResultKind::kUnwound);
}

}  // namespace
}  // namespace fp::saga

namespace fp::saga {
namespace {

// The DAG a saga's row keeps is written as text, without a tree: JSON in the form nlohmann
// writes (keys sorted, no spaces: the bytes rows written before have), read back whole.
TEST(SagaDagTest, ItsTextIsJsonAsNlohmannWritesItAndReadsBack) {
  SagaDag odd{.name = "say \"hi\"\n\u00e9",
              .params = Json{{"z", 1}, {"a", {{"nested", Json::array({1, "two", nullptr})}}}},
              .nodes = {{"first \"node\"", "toy.put"}, {"second", "a\\b"}}};
  for (const SagaDag& dag : {ToyDag(), odd, SagaDag{.name = "empty"}}) {
    const std::string text = dag.ToText();
    const Json tree = Json::parse(text);
    EXPECT_EQ(text, tree.dump()) << dag.name;
    EXPECT_EQ(tree["name"], dag.name);
    EXPECT_EQ(tree["params"], dag.params);
    SagaDag back = SagaDag::FromJson(tree).value();
    EXPECT_EQ(back.name, dag.name);
    EXPECT_EQ(back.params, dag.params);
    ASSERT_EQ(back.nodes.size(), dag.nodes.size()) << dag.name;
    for (size_t i = 0; i < dag.nodes.size(); ++i) {
      EXPECT_EQ(back.nodes[i].name, dag.nodes[i].name);
      EXPECT_EQ(back.nodes[i].action, dag.nodes[i].action);
    }
  }
}

TEST(ErrorJsonTest, AResultThatIsNoErrorObjectReadsAsAnInternalErrorWithoutThrowing) {
  EXPECT_EQ(ErrorFromJson(Json("boom")).kind(), ErrorKind::kInternal);
  EXPECT_EQ(ErrorFromJson(Json()).kind(), ErrorKind::kInternal);
  Error e = ErrorFromJson(ErrorToJson(Error::Unavailable("retry", 3)));
  EXPECT_EQ(e.kind(), ErrorKind::kServiceUnavailable);
  EXPECT_EQ(e.message(), "retry");
  EXPECT_EQ(e.retry_after_seconds(), 3);
}

}  // namespace
}  // namespace fp::saga
