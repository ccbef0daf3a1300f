// Several servers on one datastore (app/saga_coordinator.h): two saga executors with their
// coordinators share one database, as two server processes share PostgreSQL. The clock is
// manual, so leases expire when the test says; the background threads are not started, the
// tests call their steps.

#include "app/saga_coordinator.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <set>
#include <thread>

#include "common/mutex.h"
#include "common/testing/manual_clock.h"
#include "common/testing/wait_for.h"
#include "db/datastore.h"
#include "db/sagas.h"
#include "db/testing/temp_datastore.h"

namespace fp::app {
namespace {

using fp::testing::ManualClock;
using fp::testing::WaitFor;
using saga::ActionContext;
using saga::Json;

constexpr auto kTtl = std::chrono::seconds(5);
constexpr auto kGrace = std::chrono::seconds(2);

// The first run of the "toy.wait" action blocks until Open (an agent call in progress while
// the server is paused); later runs pass.
struct Gate {
  Mutex mu;
  std::condition_variable changed;
  bool open FP_GUARDED_BY(mu) = false;
  int runs FP_GUARDED_BY(mu) = 0;
  void Pass() {
    MutexLock lock(mu);
    if (++runs > 1) return;
    changed.notify_all();
    lock.Wait(changed, [&]() FP_REQUIRES(mu) { return open; });
  }
  void Open() {
    MutexLock lock(mu);
    open = true;
    changed.notify_all();
  }
  bool Entered() {
    MutexLock lock(mu);
    return runs > 0;
  }
};

// The datastore's saga store, whose writes fail while `failing` is set, as a full disk or a
// database past its deadline makes them fail (reads go on).
class FlakyStore final : public saga::SagaStore {
 public:
  explicit FlakyStore(db::Datastore& ds) : real_(ds) {}
  std::atomic<bool> failing{false};
  std::atomic<int> refused{0};

  Status Write(const std::function<Status(saga::StoreTx&)>& body) override {
    FP_CHECK_OK(Check());
    return real_.Write(body);
  }
  Result<bool> CreateIn(saga::StoreTx& tx, const saga::SagaRow& row,
                        const saga::SagaOrigin* origin) override {
    return real_.CreateIn(tx, row, origin);
  }
  Status RecordIn(saga::StoreTx& tx, const Uuid& saga_id, const saga::SagaOwner& owner,
                  const std::optional<saga::SagaEvent>& event,
                  std::optional<saga::SagaState> new_state,
                  const std::optional<std::string>& result) override {
    return real_.RecordIn(tx, saga_id, owner, event, new_state, result);
  }
  Status RecordAllIn(saga::StoreTx& tx, const Uuid& saga_id, const saga::SagaOwner& owner,
                     const saga::SagaRecord& record) override {
    return real_.RecordAllIn(tx, saga_id, owner, record);
  }
  Result<saga::SagaLog> Load(const Uuid& id) override { return real_.Load(id); }
  Result<std::vector<saga::OwnedSaga>> ListUnfinished(const std::string& sec) override {
    return real_.ListUnfinished(sec);
  }
  Result<std::optional<int64_t>> Claim(const Uuid& id, const saga::SagaOwner& owner) override {
    FP_CHECK_OK(Check());
    return real_.Claim(id, owner);
  }
  Result<bool> MarkStuck(const Uuid& id, const saga::SagaOwner& owner,
                         const std::string& result) override {
    FP_CHECK_OK(Check());
    return real_.MarkStuck(id, owner, result);
  }

 private:
  Status Check() {
    if (!failing) return Ok();
    ++refused;
    return Fail(Error::Unavailable("the database cannot be written: its disk is full"));
  }
  db::DatastoreSagaStore real_;
};

// One server: its executor, whose database actions write rows marked with the server's name,
// and its coordinator.
struct Server {
  Server(db::Datastore& datastore, const std::string& sec, Gate& gate)
      : ds(datastore),
        store(datastore),
        exec(store, registry, sec, datastore.clock(), datastore.random()) {
    const std::string writer = sec;
    registry.Add(saga::Action{
        .name = "toy.row",
        .run_in_tx = [writer](db::Tx& tx, const ActionContext& ctx) -> Result<Json> {
          FP_TRY(tx.Exec(
              "INSERT INTO toy (saga, node, writer) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
              ctx.saga_id(), ctx.node(), writer));
          return Json{{"row", ctx.node()}};
        },
        .undo_in_tx = [](db::Tx& tx, const ActionContext& ctx) -> Status {
          FP_TRY(tx.Exec("DELETE FROM toy WHERE saga = ? AND node = ?", ctx.saga_id(), ctx.node()));
          return Ok();
        }});
    registry.Add(
        saga::Action{.name = "toy.wait", .run = [&gate](const ActionContext&) -> Result<Json> {
                       gate.Pass();
                       return Json();
                     }});
  }
  ~Server() {
    if (coordinator) coordinator->Stop();
  }
  void Start(CoordinatorOptions options = {}) {
    options.lease_ttl = kTtl;
    options.adopt_grace = kGrace;
    options.recovery.first_retry = std::chrono::milliseconds(10);
    auto started = SagaCoordinator::Start(ds, exec, options);
    ASSERT_TRUE(started) << started.error().message();
    coordinator = std::move(*started);
  }

  db::Datastore& ds;
  saga::ActionRegistry registry;
  FlakyStore store;
  saga::SagaExecutor exec;
  std::unique_ptr<SagaCoordinator> coordinator;
};

class SagaCoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(ds->Write([](db::Tx& tx) -> Status {
      FP_TRY(
          tx.Exec("CREATE TABLE toy (saga TEXT NOT NULL, node TEXT NOT NULL, writer TEXT NOT NULL, "
                  "PRIMARY KEY (saga, node, writer))"));
      return Ok();
    }));
    a.Start();
    b.Start();
  }

  static saga::SagaDag Dag(std::vector<std::string> actions) {
    saga::SagaDag dag;
    dag.name = "toy";
    for (size_t i = 0; i < actions.size(); ++i) {
      dag.nodes.push_back({fmt::format("n{}", i), actions[i]});
    }
    return dag;
  }

  // The rows of the toy table as "node:writer".
  std::set<std::string> Rows(const Uuid& saga_id) {
    auto rows = ds->Read<std::set<std::string>>([&](db::Tx& tx) -> Result<std::set<std::string>> {
      std::set<std::string> out;
      for (const db::Row& r :
           FP_TRY(tx.Query("SELECT node, writer FROM toy WHERE saga = ?", saga_id))) {
        out.insert(r.Text(0) + ":" + r.Text(1));
      }
      return out;
    });
    return rows.value();
  }

  // Server `a` stops renewing (paused, or dead); `b` renews and, once a's lease expired and the
  // grace passed, adopts a's sagas and starts their recovery.
  std::vector<saga::OwnedSaga> ExpireAAndAdoptIntoB() {
    clock->Advance(std::chrono::microseconds(kTtl + kGrace).count() + 1);
    EXPECT_TRUE(b.coordinator->RenewOnce());
    auto adopted = b.coordinator->AdoptOnce();
    EXPECT_TRUE(adopted) << adopted.error().message();
    return adopted.value_or(std::vector<saga::OwnedSaga>{});
  }

  db::SagaLog Log(const Uuid& id) { return db::SagaLoad(*ds, id).value(); }

  // Runs a saga on `runner` that waits in its second node, and asserts that `recoverer`'s
  // periodic recovery of its own sagas takes it neither over nor to a new generation; then lets
  // it finish.
  void ExpectRecoveryLeavesARunningSagaAlone(Server& runner, Server& recoverer) {
    Result<saga::SagaOutcome> out = Fail(Error::Internal("not run"));
    std::thread request([&] { out = runner.exec.RunNew(Dag({"toy.row", "toy.wait", "toy.row"})); });
    ASSERT_TRUE(WaitFor([&] { return gate.Entered(); }));
    auto own = runner.exec.ListUnfinished().value();
    ASSERT_EQ(own.size(), 1u);
    EXPECT_EQ(recoverer.coordinator->RecoverOwnOnce().value(), 0u);
    EXPECT_EQ(Log(own[0].id).saga.owner.generation, own[0].generation);
    gate.Open();
    request.join();
    ASSERT_TRUE(out) << out.error().message();
    EXPECT_EQ(out->kind, saga::SagaResultKind::kDone);
  }
  int64_t SagaRows() {
    return ds
        ->Read<int64_t>([](db::Tx& tx) -> Result<int64_t> {
          return FP_TRY(tx.QueryRow("SELECT count(*) FROM saga"))->Int(0);
        })
        .value();
  }

  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>();
  db::testing::TempDatastore ds{clock};
  Gate gate;
  Server a{*ds, "a", gate};
  Server b{*ds, "b", gate};
};

// A saga adopted between two of its nodes: the former owner's next database action is refused
// with its log event and rolls back with it, its request gets a 503 saying the saga was lost
// to another server, and the adopter finishes the saga.
TEST_F(SagaCoordinatorTest, AStaleOwnersActionRollsBackWithItsRefusedEventAndTheAdopterFinishes) {
  std::optional<Uuid> saga_id;
  a.exec.SetFaultPlanForTest(saga::FaultPlan{.call_after_node = 0, .after_node_call = [&] {
                                               auto adopted = ExpireAAndAdoptIntoB();
                                               ASSERT_EQ(adopted.size(), 1u);
                                               saga_id = adopted[0].id;
                                             }});
  auto out = a.exec.RunNew(Dag({"toy.row", "toy.row", "toy.row"}));
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().kind(), ErrorKind::kServiceUnavailable);
  EXPECT_TRUE(saga::IsLostSaga(out.error())) << out.error().message();
  EXPECT_NE(out.error().message().find("another server adopted it"), std::string::npos);
  EXPECT_NE(out.error().message().find("retry the request"), std::string::npos);
  ASSERT_TRUE(saga_id);
  ASSERT_TRUE(WaitFor([&] { return b.coordinator->recovering() == 0; }));
  db::SagaLog log = Log(*saga_id);
  EXPECT_EQ(log.saga.state, db::SagaState::kDone);
  EXPECT_EQ(log.saga.owner.sec, "b");
  EXPECT_GE(log.saga.owner.generation, 2);
  // a's node 1 row rolled back with its refused event; b ran nodes 1 and 2.
  EXPECT_EQ(Rows(*saga_id), (std::set<std::string>{"n0:a", "n1:b", "n2:b"}));
}

// A paused server (SIGSTOP) whose saga was adopted and finished meanwhile: when its agent call
// returns, its next log write is refused, it stops driving the saga, and the request gets 503.
TEST_F(SagaCoordinatorTest, AResumedZombieStopsAtItsNextWriteAfterTheAdopterFinished) {
  Result<saga::SagaOutcome> out = Fail(Error::Internal("not run"));
  std::thread request([&] { out = a.exec.RunNew(Dag({"toy.row", "toy.wait", "toy.row"})); });
  ASSERT_TRUE(WaitFor([&] { return gate.Entered(); }));
  auto adopted = ExpireAAndAdoptIntoB();
  ASSERT_EQ(adopted.size(), 1u);
  ASSERT_TRUE(WaitFor([&] { return b.coordinator->recovering() == 0; }));
  EXPECT_EQ(Log(adopted[0].id).saga.state, db::SagaState::kDone);
  gate.Open();  // SIGCONT
  request.join();
  ASSERT_FALSE(out);
  EXPECT_TRUE(saga::IsLostSaga(out.error())) << out.error().message();
  EXPECT_EQ(Rows(adopted[0].id), (std::set<std::string>{"n0:a", "n2:b"}));
  EXPECT_FALSE(a.exec.IsRunning(adopted[0].id));
}

// A saga that was unwinding when its server died is unwound by the adopter.
TEST_F(SagaCoordinatorTest, TheAdopterUnwindsASagaThatWasUnwinding) {
  // As a left it: node 0 done (its row written), node 1 failed, the saga unwinding.
  saga::SagaRow row{Uuid::TimeOrdered(), "toy", Dag({"toy.row", "toy.row"}).ToText(),
                    saga::SagaState::kRunning, saga::SagaOwner{"a", 1}};
  ASSERT_TRUE(a.store.Write([&](saga::StoreTx& stx) -> Status {
    auto& tx = static_cast<db::Tx&>(stx);
    FP_TRY(a.store.CreateIn(tx, row, nullptr));
    FP_TRY(tx.Exec("INSERT INTO toy (saga, node, writer) VALUES (?, 'n0', 'a')", row.id));
    FP_CHECK_OK(a.store.RecordIn(tx, row.id, row.owner,
                                 saga::SagaEvent{0, saga::SagaEventType::kSucceeded, "{}"},
                                 std::nullopt, std::nullopt));
    return a.store.RecordIn(
        tx, row.id, row.owner,
        saga::SagaEvent{1, saga::SagaEventType::kFailed, R"({"kind":"internal","message":"x"})"},
        saga::SagaState::kUnwinding, std::nullopt);
  }));
  auto adopted = ExpireAAndAdoptIntoB();
  ASSERT_EQ(adopted, (std::vector<saga::OwnedSaga>{{row.id, 2}}));
  ASSERT_TRUE(WaitFor([&] { return b.coordinator->recovering() == 0; }));
  db::SagaLog log = Log(row.id);
  EXPECT_EQ(log.saga.state, db::SagaState::kUnwound);
  EXPECT_EQ(log.saga.owner.sec, "b");
  EXPECT_TRUE(Rows(row.id).empty());  // b undid a's node 0
}

// Without a live lease a server starts no saga (and writes nothing) until it renewed.
TEST_F(SagaCoordinatorTest, AServerWhoseLeaseExpiredStartsNoSagaUntilItRenewed) {
  ASSERT_TRUE(a.exec.RunNew(Dag({"toy.row"})));
  int64_t sagas = SagaRows();
  clock->Advance(std::chrono::microseconds(kTtl).count());
  auto refused = a.exec.RunNew(Dag({"toy.row"}));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().kind(), ErrorKind::kServiceUnavailable);
  EXPECT_NE(refused.error().message().find("lease expired"), std::string::npos)
      << refused.error().message();
  EXPECT_EQ(SagaRows(), sagas);
  ASSERT_TRUE(a.coordinator->RenewOnce());
  EXPECT_TRUE(a.exec.RunNew(Dag({"toy.row"})));
  EXPECT_EQ(SagaRows(), sagas + 1);
}

// A server that may itself be taken for dead (its lease not renewed in time) adopts nothing
// until it renewed.
TEST_F(SagaCoordinatorTest, AServerWhoseLeaseExpiredAdoptsNothingUntilItRenewed) {
  saga::SagaRow row{Uuid::TimeOrdered(), "toy", Dag({"toy.row"}).ToText(),
                    saga::SagaState::kRunning, saga::SagaOwner{"gone", 1}};
  ASSERT_TRUE(a.store.Create(row).value());
  clock->Advance(std::chrono::microseconds(kTtl).count());
  EXPECT_TRUE(a.coordinator->AdoptOnce().value().empty());
  EXPECT_EQ(Log(row.id).saga.owner.sec, "gone");
  ASSERT_TRUE(a.coordinator->RenewOnce());
  EXPECT_EQ(a.coordinator->AdoptOnce().value().size(), 1u);
  ASSERT_TRUE(WaitFor([&] { return a.coordinator->recovering() == 0; }));
  EXPECT_EQ(Log(row.id).saga.state, db::SagaState::kDone);
}

// A server adopts nothing while the owner's lease is live, nor during the grace after it.
TEST_F(SagaCoordinatorTest, NothingIsAdoptedWhileTheOwnersLeaseIsLiveOrInItsGrace) {
  Result<saga::SagaOutcome> out = Fail(Error::Internal("not run"));
  std::thread request([&] { out = a.exec.RunNew(Dag({"toy.row", "toy.wait"})); });
  ASSERT_TRUE(WaitFor([&] { return gate.Entered(); }));
  EXPECT_TRUE(b.coordinator->AdoptOnce().value().empty());
  clock->Advance(std::chrono::microseconds(kTtl).count() + 1);
  ASSERT_TRUE(b.coordinator->RenewOnce());
  EXPECT_TRUE(b.coordinator->AdoptOnce().value().empty());  // in the grace
  ASSERT_TRUE(a.coordinator->RenewOnce());                  // a came back in time
  clock->Advance(std::chrono::microseconds(kGrace).count() + 1);
  ASSERT_TRUE(b.coordinator->RenewOnce());
  EXPECT_TRUE(b.coordinator->AdoptOnce().value().empty());
  gate.Open();
  request.join();
  ASSERT_TRUE(out) << out.error().message();
  EXPECT_EQ(out->kind, saga::SagaResultKind::kDone);
}

// A restart under the same coordinator id takes the sagas of the earlier run over under a new
// generation and finishes them; the earlier process (a zombie) is fenced and learns on its next
// renewal that it was superseded.
TEST_F(SagaCoordinatorTest, ARestartUnderTheSameIdTakesItsSagasBackAndFencesTheZombie) {
  Server restarted(*ds, "a", gate);
  std::optional<Uuid> saga_id;
  a.exec.SetFaultPlanForTest(saga::FaultPlan{.call_after_node = 0, .after_node_call = [&] {
                                               saga_id = a.exec.ListUnfinished().value().at(0).id;
                                               restarted.Start();
                                             }});
  auto out = a.exec.RunNew(Dag({"toy.row", "toy.row"}));
  ASSERT_FALSE(out);
  EXPECT_TRUE(saga::IsLostSaga(out.error())) << out.error().message();
  ASSERT_TRUE(saga_id);
  EXPECT_EQ(restarted.coordinator->sagas_at_start(), 1u);
  ASSERT_TRUE(WaitFor([&] { return restarted.coordinator->recovering() == 0; }));
  EXPECT_EQ(Log(*saga_id).saga.state, db::SagaState::kDone);
  EXPECT_EQ(Rows(*saga_id), (std::set<std::string>{"n0:a", "n1:a"}));
  Status renewed = a.coordinator->RenewOnce();
  ASSERT_FALSE(renewed);
  EXPECT_NE(renewed.error().message().find("taken over by another server process"),
            std::string::npos);
  auto refused = a.exec.RunNew(Dag({"toy.row"}));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().kind(), ErrorKind::kServiceUnavailable);
  EXPECT_TRUE(restarted.exec.RunNew(Dag({"toy.row"})));
}

// A process whose coordinator id another process took over (a restart while it was paused)
// shares that id with the new one: its periodic recovery of "its own" sagas must take none of
// them, or the two processes would claim them from each other in turn, each claim cutting the
// other's run short.
TEST_F(SagaCoordinatorTest, AProcessWhoseIdWasTakenOverRecoversNothing) {
  Server restarted(*ds, "a", gate);
  restarted.Start();
  ASSERT_FALSE(a.coordinator->RenewOnce());  // a learns that it was taken over
  ExpectRecoveryLeavesARunningSagaAlone(restarted, a);
}

// Recovery never takes over a saga a request of this server is running.
TEST_F(SagaCoordinatorTest, RecoveryLeavesASagaThisServerRunsAlone) {
  ExpectRecoveryLeavesARunningSagaAlone(a, a);
}

// A saga of this server that nothing drives (its request gave up on an engine error) is
// resumed by the periodic recovery.
TEST_F(SagaCoordinatorTest, OwnSagasNothingDrivesAreRecovered) {
  saga::SagaRow row{Uuid::TimeOrdered(), "toy", Dag({"toy.row", "toy.row"}).ToText(),
                    saga::SagaState::kRunning, saga::SagaOwner{"a", 1}};
  ASSERT_TRUE(a.store.Create(row).value());
  EXPECT_EQ(a.coordinator->RecoverOwnOnce().value(), 1u);
  ASSERT_TRUE(WaitFor([&] { return a.coordinator->recovering() == 0; }));
  EXPECT_EQ(Log(row.id).saga.state, db::SagaState::kDone);
  EXPECT_EQ(Rows(row.id), (std::set<std::string>{"n0:a", "n1:a"}));
}

// A saga whose request gave up on an engine error (here the store refusing writes, as on a
// full disk) is taken up again by the running server at once, not at the next periodic pass,
// and retried with backoff while the store fails, without being marked stuck; once the store
// takes writes again it ends.
TEST_F(SagaCoordinatorTest, ASagaLeftByAnEngineErrorIsTakenUpAgainWhileTheServerRuns) {
  Server c(*ds, "c", gate);
  CoordinatorOptions options;
  options.own_recovery_interval = std::chrono::hours(1);  // only the request's hook brings it
  options.own_recovery_min_gap = std::chrono::milliseconds(1);
  c.Start(options);
  c.coordinator->StartBackground();

  Result<saga::SagaOutcome> out = saga::SagaOutcome{};
  std::thread request([&] { out = c.exec.RunNew(Dag({"toy.row", "toy.wait", "toy.row"})); });
  ASSERT_TRUE(WaitFor([&] { return gate.Entered(); }));
  c.store.failing = true;
  gate.Open();  // the wait node's "succeeded" event cannot be written
  request.join();
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().kind(), ErrorKind::kServiceUnavailable) << out.error().message();

  // Recovery claims the saga at once, and again after each backoff (on the datastore's clock,
  // moved here as the test waits) while the store fails.
  auto while_time_passes = [&](auto done) {
    return WaitFor([&] {
      clock->Advance(std::chrono::milliseconds(50));
      return done();
    });
  };
  ASSERT_TRUE(while_time_passes([&] { return c.store.refused >= 4; }));
  auto own = c.exec.ListUnfinished().value();
  ASSERT_EQ(own.size(), 1u);
  EXPECT_EQ(Log(own[0].id).saga.state, db::SagaState::kRunning);

  c.store.failing = false;
  ASSERT_TRUE(while_time_passes([&] { return Log(own[0].id).saga.state == db::SagaState::kDone; }));
  EXPECT_EQ(Rows(own[0].id), (std::set<std::string>{"n0:c", "n2:c"}));
}

}  // namespace
}  // namespace fp::app
