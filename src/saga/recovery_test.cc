// Recovery off the start path: unfinished sagas resume on a few threads at once, one that
// cannot resume is marked stuck without holding up the others, and a stop leaves what is not
// finished to the next start.

#include "saga/recovery.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <stdexcept>
#include <thread>

#include "common/mutex.h"
#include "common/testing/wait_for.h"
#include "saga/testing/memory_store.h"

namespace fp::saga {
namespace {

using testing::MemoryStore;

// Holds every run of the "gate" action until released, counting the runs in progress.
struct Gate {
  Mutex mu;
  std::condition_variable changed;
  int in_flight FP_GUARDED_BY(mu) = 0;
  int most_in_flight FP_GUARDED_BY(mu) = 0;
  int runs FP_GUARDED_BY(mu) = 0;
  bool open FP_GUARDED_BY(mu) = false;

  void Pass() {
    MutexLock lock(mu);
    ++in_flight;
    ++runs;
    most_in_flight = std::max(most_in_flight, in_flight);
    changed.notify_all();
    lock.Wait(changed, [&]() FP_REQUIRES(mu) { return open; });
    --in_flight;
  }
  // Opens the gate when it goes out of scope: declared after a recovery, it lets the
  // recovery's workers finish when an assertion ends the test early.
  struct OpenAtExit {
    Gate& gate;
    ~OpenAtExit() { gate.Open(); }
  };

  void Open() {
    MutexLock lock(mu);
    open = true;
    changed.notify_all();
  }
  int InFlight() {
    MutexLock lock(mu);
    return in_flight;
  }
  int MostInFlight() {
    MutexLock lock(mu);
    return most_in_flight;
  }
  int Runs() {
    MutexLock lock(mu);
    return runs;
  }
};

class RecoveryTest : public ::testing::Test {
 protected:
  RecoveryTest() {
    registry.Add(Action{.name = "test.step", .run = [](const ActionContext&) -> Result<Json> {
                          return Json::object();
                        }});
    registry.Add(Action{.name = "test.throws", .run = [](const ActionContext&) -> Result<Json> {
                          // As nlohmann's at() does on parameters a saga lacks.
                          throw std::runtime_error("key 'instance_id' not found");
                        }});
    registry.Add(Action{.name = "test.gate", .run = [this](const ActionContext&) -> Result<Json> {
                          gate.Pass();
                          return Json::object();
                        }});
  }

  // A saga as a crash before its first node left it: created, running, no event.
  Uuid UnfinishedDag(const std::string& dag) {
    Uuid id = Uuid::TimeOrdered();
    SagaRow row{id, "test", dag, SagaState::kRunning, SagaOwner{"sec-test", 1}};
    EXPECT_TRUE(store.Create(row));
    return id;
  }
  Uuid Unfinished(std::vector<Node> nodes) {
    SagaDag dag;
    dag.name = "test";
    dag.nodes = std::move(nodes);
    return UnfinishedDag(dag.ToText());
  }

  SagaState StateOf(const Uuid& id) { return store.Load(id)->saga.state; }

  MemoryStore store;
  Gate gate;
  ActionRegistry registry;
  SystemClock clock;
  SystemRandom random;
  SagaExecutor exec{store, registry, "sec-test", clock, random};
};

TEST_F(RecoveryTest, ASagaThatCannotResumeIsMarkedStuckAndTheRestStillRecover) {
  Uuid before = Unfinished({{"a", "test.step"}, {"b", "test.step"}});
  Uuid corrupt = UnfinishedDag(R"({"not": "a saga DAG"})");
  Uuid unknown = Unfinished({{"a", "test.step"}, {"b", "no_longer.registered"}});
  Uuid throws = Unfinished({{"a", "test.step"}, {"b", "test.throws"}});
  Uuid after = Unfinished({{"a", "test.step"}});

  Mutex mu;
  std::map<Uuid, RecoveryEvent> events;
  RecoveryOptions options;
  options.report = [&](const RecoveryEvent& e) {
    MutexLock lock(mu);
    events[e.saga_id] = e;
  };
  auto recovery = SagaRecovery::Start(exec, options);
  ASSERT_TRUE(recovery) << recovery.error().message();
  EXPECT_EQ((*recovery)->sagas(), (std::vector<Uuid>{before, corrupt, unknown, throws, after}));
  (*recovery)->Wait();

  EXPECT_EQ(StateOf(before), SagaState::kDone);
  EXPECT_EQ(StateOf(after), SagaState::kDone);
  EXPECT_EQ(events[before].kind, RecoveryEvent::Kind::kAtRest);
  EXPECT_EQ(events[before].outcome.kind, SagaResultKind::kDone);
  for (const auto& [id, why] :
       {std::pair{corrupt, "corrupt saga DAG"},
        std::pair{unknown, "\"no_longer.registered\" is not registered"},
        std::pair{throws, "resuming the saga threw an exception: key 'instance_id' not found"}}) {
    SCOPED_TRACE(why);
    EXPECT_EQ(StateOf(id), SagaState::kStuck);
    EXPECT_EQ(events[id].kind, RecoveryEvent::Kind::kCannotResume);
    EXPECT_EQ(events[id].outcome.kind, SagaResultKind::kStuck);
    ASSERT_TRUE(events[id].error);
    EXPECT_NE(events[id].error->message().find(why), std::string::npos)
        << events[id].error->message();
    // The reason is kept with the saga for operators.
    auto result = Json::parse(*store.Load(id)->saga.result);
    EXPECT_NE(result["message"].get<std::string>().find(why), std::string::npos) << result;
  }
  // Nothing is left for the next start, and a stuck saga is not taken up again.
  EXPECT_TRUE(exec.ListUnfinished()->empty());
  auto again = exec.RecoverAll();
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->empty());
}

TEST_F(RecoveryTest, ResumesSeveralSagasAtOnceButNoMoreThanItsConcurrency) {
  constexpr int kSagas = 16;
  constexpr int kConcurrency = 8;
  std::vector<Uuid> ids;
  for (int i = 0; i < kSagas; ++i) ids.push_back(Unfinished({{"gate", "test.gate"}}));
  auto recovery = SagaRecovery::Start(exec, RecoveryOptions{.concurrency = kConcurrency});
  ASSERT_TRUE(recovery);
  Gate::OpenAtExit open_at_exit{gate};
  ASSERT_TRUE(fp::testing::WaitFor([&] { return gate.InFlight() == kConcurrency; }))
      << "in flight: " << gate.InFlight();
  gate.Open();
  (*recovery)->Wait();
  for (const Uuid& id : ids) EXPECT_EQ(StateOf(id), SagaState::kDone);
  EXPECT_EQ(gate.MostInFlight(), kConcurrency);
  EXPECT_EQ(gate.Runs(), kSagas);
}

TEST_F(RecoveryTest, AStopLeavesWhatIsNotFinishedToTheNextStart) {
  constexpr int kSagas = 6;
  std::vector<Uuid> ids;
  for (int i = 0; i < kSagas; ++i) {
    ids.push_back(Unfinished({{"gate", "test.gate"}, {"then", "test.step"}}));
  }
  auto recovery = SagaRecovery::Start(exec, RecoveryOptions{.concurrency = 2});
  ASSERT_TRUE(recovery);
  Gate::OpenAtExit open_at_exit{gate};
  ASSERT_TRUE(fp::testing::WaitFor([&] { return gate.InFlight() == 2; }));
  // Shutdown: the two sagas in their first node stop before the next one; the others are not
  // taken up.
  exec.Quiesce();
  gate.Open();
  (*recovery)->Stop();
  (*recovery)->Wait();
  EXPECT_EQ(gate.Runs(), 2);
  for (const Uuid& id : ids) EXPECT_EQ(StateOf(id), SagaState::kRunning);

  SagaExecutor next{store, registry, "sec-test", clock, random};
  auto recovered = next.RecoverAll();
  ASSERT_TRUE(recovered) << recovered.error().message();
  ASSERT_EQ(recovered->size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ((*recovered)[i].first, ids[i]);  // reported in the order they were listed
    EXPECT_EQ((*recovered)[i].second.kind, SagaResultKind::kDone);
    EXPECT_EQ(StateOf(ids[i]), SagaState::kDone);
  }
}

// Recovery takes each saga over under a new generation before resuming it (fencing any other
// execution of it), but never one this executor is running, and drops one another
// coordinator adopted.
TEST_F(RecoveryTest, ClaimsEachSagaButNeverOneTheExecutorRunsOrAnotherOwns) {
  Uuid running = Unfinished({{"gate", "test.gate"}});
  Uuid adopted = Unfinished({{"a", "test.step"}});
  Uuid mine = Unfinished({{"a", "test.step"}});
  store.Adopt(adopted, "sec-other");
  Result<SagaOutcome> out = Fail(Error::Internal("not run"));
  std::thread request([&] { out = exec.Resume(running); });
  Gate::OpenAtExit open_at_exit{gate};
  ASSERT_TRUE(fp::testing::WaitFor([&] { return gate.InFlight() == 1; }));
  std::vector<Uuid> finished;
  Mutex mu;
  RecoveryOptions options;
  options.finished = [&](const Uuid& id) {
    MutexLock lock(mu);
    finished.push_back(id);
  };
  auto recovery = SagaRecovery::StartWith(exec, options, {{running, 1}, {adopted, 1}, {mine, 1}});
  EXPECT_TRUE(fp::testing::WaitFor([&] { return recovery->finished(); }));
  recovery->Stop();
  MutexLock lock(mu);
  EXPECT_EQ(finished.size(), 3u);
  EXPECT_EQ(store.Load(running)->saga.owner.generation, 1);  // untouched
  EXPECT_EQ(store.Load(adopted)->saga.owner, (SagaOwner{"sec-other", 2}));
  EXPECT_EQ(StateOf(adopted), SagaState::kRunning);
  EXPECT_EQ(store.Load(mine)->saga.owner.generation, 2);
  EXPECT_EQ(StateOf(mine), SagaState::kDone);
  gate.Open();
  request.join();
  ASSERT_TRUE(out) << out.error().message();
  EXPECT_EQ(StateOf(running), SagaState::kDone);
}

}  // namespace
}  // namespace fp::saga
