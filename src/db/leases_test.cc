// Coordinator leases, adoption of the sagas of expired coordinators, task leases (db/leases.h).

#include "db/leases.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <thread>

#include "common/mutex.h"
#include "common/testing/manual_clock.h"
#include "db/instances.h"
#include "db/sagas.h"
#include "db/sleds.h"
#include "db/testing/temp_datastore.h"
#include "db/vm_removals.h"

namespace fp::db {
namespace {

using fp::testing::ManualClock;
using testing::TempDatastore;

using fp::testing::kSecond;

// Whether a write carrying a lease's fencing token was refused because the lease is no longer
// that token's (ServiceUnavailable), not for another reason or not at all.
template <typename T>
::testing::AssertionResult FencedOut(const Result<T>& write) {
  if (write) return ::testing::AssertionFailure() << "the write went through";
  if (write.error().kind() != ErrorKind::kServiceUnavailable) {
    return ::testing::AssertionFailure() << "refused otherwise: " << write.error().message();
  }
  return ::testing::AssertionSuccess();
}

class LeasesTest : public ::testing::Test {
 protected:
  // An unfinished saga owned by `sec` in generation 1.
  Uuid SagaOf(const std::string& sec) {
    SagaRow row{Uuid::TimeOrdered(), "toy", R"({"name":"toy","nodes":[]})", SagaState::kRunning,
                SagaOwner{sec, 1}};
    EXPECT_TRUE(store.Create(row).value());
    return row.id;
  }
  SagaOwner OwnerOf(const Uuid& id) { return SagaLoad(*ds, id).value().saga.owner; }

  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>();
  TempDatastore ds{clock};
  DatastoreSagaStore store{*ds};
};

TEST_F(LeasesTest, RenewalExtendsTheLeaseOnlyForItsIncarnation) {
  ASSERT_TRUE(SecLeaseTake(*ds, "a", "run-1", 5 * kSecond));
  clock->Advance(3 * kSecond);
  auto renewed = SecLeaseRenew(*ds, "a", "run-1", 5 * kSecond);
  ASSERT_TRUE(renewed) << renewed.error().message();
  ASSERT_TRUE(*renewed);
  EXPECT_EQ(**renewed, clock->Now() + 5 * kSecond);
  auto leases = SecLeaseList(*ds).value();
  ASSERT_EQ(leases.size(), 1u);
  EXPECT_EQ(leases[0].expires_at, clock->Now() + 5 * kSecond);
  EXPECT_EQ(leases[0].incarnation, "run-1");

  // A restart under the same id takes the lease over; the earlier process can no longer renew.
  ASSERT_TRUE(SecLeaseTake(*ds, "a", "run-2", 5 * kSecond));
  EXPECT_EQ(SecLeaseRenew(*ds, "a", "run-1", 5 * kSecond).value(), std::nullopt);
  EXPECT_EQ(SecLeaseList(*ds).value()[0].incarnation, "run-2");
  EXPECT_TRUE(SecLeaseRenew(*ds, "a", "run-2", 5 * kSecond).value());
}

TEST_F(LeasesTest, TakingTheLeaseAtStartBumpsTheGenerationOfOwnUnfinishedSagas) {
  Uuid mine = SagaOf("a");
  Uuid done = SagaOf("a");
  ASSERT_TRUE(store.Record(done, SagaOwner{"a", 1}, std::nullopt, SagaState::kDone, "null"));
  Uuid theirs = SagaOf("b");
  auto taken = SecLeaseTake(*ds, "a", "run-1", 5 * kSecond);
  ASSERT_TRUE(taken) << taken.error().message();
  EXPECT_EQ(taken->own_sagas, (std::vector<saga::OwnedSaga>{{mine, 2}}));
  EXPECT_EQ(OwnerOf(mine).generation, 2);
  EXPECT_EQ(OwnerOf(done).generation, 1);
  EXPECT_EQ(OwnerOf(theirs).generation, 1);
  // The earlier run's writes are fenced.
  EXPECT_FALSE(store.Record(mine, SagaOwner{"a", 1}, std::nullopt, SagaState::kDone, "null"));
}

TEST_F(LeasesTest, SagasAreAdoptedOnlyOnceTheLeaseExpiredAndTheGracePassed) {
  ASSERT_TRUE(SecLeaseTake(*ds, "a", "run-a", 5 * kSecond));
  ASSERT_TRUE(SecLeaseTake(*ds, "b", "run-b", 5 * kSecond));
  Uuid id = SagaOf("a");
  const int64_t grace = 2 * kSecond;
  EXPECT_TRUE(SagaAdoptExpired(*ds, "b", grace, 100).value().empty());
  clock->Advance(5 * kSecond + 1);  // a's lease expired, the grace has not passed
  EXPECT_TRUE(SagaAdoptExpired(*ds, "b", grace, 100).value().empty());
  EXPECT_EQ(OwnerOf(id).sec, "a");
  // A renewal in time keeps the sagas.
  ASSERT_TRUE(SecLeaseRenew(*ds, "a", "run-a", 5 * kSecond).value());
  clock->Advance(5 * kSecond + grace);
  EXPECT_TRUE(SagaAdoptExpired(*ds, "b", grace, 100).value().empty());
  clock->Advance(1);
  auto adopted = SagaAdoptExpired(*ds, "b", grace, 100);
  ASSERT_TRUE(adopted) << adopted.error().message();
  EXPECT_EQ(*adopted, (std::vector<saga::OwnedSaga>{{id, 2}}));
  EXPECT_EQ(OwnerOf(id).sec, "b");
  EXPECT_EQ(OwnerOf(id).generation, 2);
  // The former owner is fenced.
  Status stale = store.Record(id, SagaOwner{"a", 1}, std::nullopt, SagaState::kDone, "null");
  ASSERT_FALSE(stale);
  EXPECT_TRUE(saga::IsLostSaga(stale.error()));
}

TEST_F(LeasesTest, SagasOfACoordinatorThatNeverHeldALeaseAreAdoptedAtOnce) {
  Uuid legacy = SagaOf("sqlite-server");  // written by a server of an earlier version
  ASSERT_TRUE(SecLeaseTake(*ds, "b", "run-b", 5 * kSecond));
  EXPECT_EQ(SagaAdoptExpired(*ds, "b", 2 * kSecond, 100).value(),
            (std::vector<saga::OwnedSaga>{{legacy, 2}}));
}

// Sagas begun at the same instant (a clock that did not move between them) are listed, taken
// back and adopted in id order on both engines, not in the order the engine happens to keep
// equal keys: the simulation's runs on SQLite and PostgreSQL must resume them alike.
TEST_F(LeasesTest, SagasBegunAtTheSameInstantComeInIdOrder) {
  const Uuid low = *Uuid::Parse("01000000-0000-7000-8000-000000000001");
  const Uuid high = *Uuid::Parse("01000000-0000-7000-8000-000000000002");
  for (const Uuid& id : {high, low}) {  // the higher id first
    SagaRow row{id, "toy", R"({"name":"toy","nodes":[]})", SagaState::kRunning, SagaOwner{"a", 1}};
    ASSERT_TRUE(store.Create(row).value());
  }
  EXPECT_EQ(store.ListUnfinished("a").value(), (std::vector<saga::OwnedSaga>{{low, 1}, {high, 1}}));
  EXPECT_EQ(SecLeaseTake(*ds, "a", "run-a", 5 * kSecond).value().own_sagas,
            (std::vector<saga::OwnedSaga>{{low, 2}, {high, 2}}));
  ASSERT_TRUE(SecLeaseTake(*ds, "b", "run-b", 60 * kSecond));
  clock->Advance(8 * kSecond);  // a's lease expired 3 s ago, past the grace
  EXPECT_EQ(SagaAdoptExpired(*ds, "b", 2 * kSecond, 100).value(),
            (std::vector<saga::OwnedSaga>{{low, 3}, {high, 3}}));
}

TEST_F(LeasesTest, TwoLiveAdoptersAdoptEachSagaOfADeadCoordinatorOnce) {
  ASSERT_TRUE(SecLeaseTake(*ds, "b", "run-b", 60 * kSecond));
  ASSERT_TRUE(SecLeaseTake(*ds, "c", "run-c", 60 * kSecond));
  // Rounds of sagas left by a dead coordinator, which b and c both find before either adopts.
  for (int round = 0; round < 3; ++round) {
    std::vector<Uuid> sagas;
    for (int i = 0; i < 10; ++i) sagas.push_back(SagaOf("dead"));
    std::vector<saga::OwnedSaga> by_b, by_c;
    // Both have found the sagas to adopt before either writes.
    Mutex mu;
    std::condition_variable both;
    int probed = 0;
    ds->TEST_SetSyncPoint([&](std::string_view point) {
      if (point != "saga_adopt:probed") return;
      MutexLock lock(mu);
      ++probed;
      both.notify_all();
      MachineClock().WaitFor(lock, both, std::chrono::seconds(5), [&] { return probed == 2; });
    });
    auto adopt = [&](const std::string& sec, std::vector<saga::OwnedSaga>& out) {
      auto got = SagaAdoptExpired(*ds, sec, 0, 100);
      ASSERT_TRUE(got) << got.error().message();
      out = *got;
    };
    std::thread b([&] { adopt("b", by_b); });
    std::thread c([&] { adopt("c", by_c); });
    b.join();
    c.join();
    ds->TEST_SetSyncPoint(nullptr);
    EXPECT_EQ(probed, 2);
    EXPECT_EQ(by_b.size() + by_c.size(), sagas.size());
    for (const auto& [list, sec] : {std::pair{&by_b, "b"}, std::pair{&by_c, "c"}}) {
      for (const saga::OwnedSaga& s : *list) {
        EXPECT_EQ(OwnerOf(s.id).sec, sec);
        EXPECT_EQ(OwnerOf(s.id).generation, 2);
      }
    }
  }
}

TEST_F(LeasesTest, ATaskLeaseHasOneHolderAtATime) {
  EXPECT_TRUE(TaskLeaseAcquire(*ds, "nat", "a", 3 * kSecond).value());
  EXPECT_FALSE(TaskLeaseAcquire(*ds, "nat", "b", 3 * kSecond).value());
  EXPECT_TRUE(TaskLeaseAcquire(*ds, "other", "b", 3 * kSecond).value());
  clock->Advance(2 * kSecond);
  EXPECT_TRUE(TaskLeaseAcquire(*ds, "nat", "a", 3 * kSecond).value());  // renewed
  clock->Advance(2 * kSecond);
  EXPECT_FALSE(TaskLeaseAcquire(*ds, "nat", "b", 3 * kSecond).value());
  clock->Advance(1 * kSecond + 1);  // a's lease expired
  EXPECT_TRUE(TaskLeaseAcquire(*ds, "nat", "b", 3 * kSecond).value());
  EXPECT_FALSE(TaskLeaseAcquire(*ds, "nat", "a", 3 * kSecond).value());
  ASSERT_TRUE(TaskLeaseRelease(*ds, "nat", "a"));  // not a's: no effect
  EXPECT_FALSE(TaskLeaseAcquire(*ds, "nat", "a", 3 * kSecond).value());
  ASSERT_TRUE(TaskLeaseRelease(*ds, "nat", "b"));
  EXPECT_TRUE(TaskLeaseAcquire(*ds, "nat", "a", 3 * kSecond).value());
}

TEST_F(LeasesTest, ATaskLeaseKeeperHoldsUntilItsLeaseRunsOutAndRenewsInTime) {
  TaskLeaseKeeper a(*ds, "watch", "a", 4 * kSecond);
  TaskLeaseKeeper b(*ds, "watch", "b", 4 * kSecond);
  EXPECT_TRUE(a.Held());
  EXPECT_FALSE(b.Held());
  int64_t commits = ds->durable_commits();
  clock->Advance(1 * kSecond);
  EXPECT_TRUE(a.Held());  // more than half left: no write
  EXPECT_EQ(ds->durable_commits(), commits);
  clock->Advance(2 * kSecond);
  EXPECT_TRUE(a.Held());  // renewed
  EXPECT_FALSE(b.Held());
  // a stops renewing (paused): by its own clock it stops holding when b may take over.
  clock->Advance(4 * kSecond + 1);
  EXPECT_TRUE(b.Held());
  EXPECT_FALSE(a.Held());
  b.Release();
  EXPECT_TRUE(a.Held());
}

// A server waiting for a lease looks often (the sled watcher's keeper, every eighth of a TTL):
// while another server holds it, a look is a read, not a durable commit.
TEST_F(LeasesTest, AKeeperWaitingForALeaseHeldElsewhereLooksWithoutCommitting) {
  TaskLeaseKeeper a(*ds, "watch", "a", 4 * kSecond);
  TaskLeaseKeeper b(*ds, "watch", "b", 4 * kSecond);
  ASSERT_TRUE(a.Held());
  const int64_t commits = ds->durable_commits();
  EXPECT_FALSE(b.Held());
  EXPECT_FALSE(b.Held());
  EXPECT_EQ(ds->durable_commits(), commits);
  clock->Advance(4 * kSecond + 1);  // a's lease ran out (a was paused): b takes it over
  EXPECT_TRUE(b.Held());
  EXPECT_EQ(ds->durable_commits(), commits + 1);
  EXPECT_FALSE(a.Held());
}

TEST_F(LeasesTest, AVmRemovalMarkHoldsPlacementsBackUntilItEndsOrExpires) {
  Uuid instance = Uuid::Random();  // no such instance: an orphan
  auto orphan = [](const std::optional<Instance>& i) { return !i.has_value(); };
  auto not_orphan = [](const std::optional<Instance>&) { return false; };
  EXPECT_FALSE(VmRemovalBeginIf(*ds, instance, "a", 10 * kSecond, not_orphan).value());
  EXPECT_FALSE(VmRemovalInProgress(*ds, instance).value());
  EXPECT_TRUE(VmRemovalBeginIf(*ds, instance, "a", 10 * kSecond, orphan).value());
  EXPECT_TRUE(VmRemovalInProgress(*ds, instance).value());
  // Another server's removal of the same VM waits for this one.
  EXPECT_FALSE(VmRemovalBeginIf(*ds, instance, "b", 10 * kSecond, orphan).value());
  ASSERT_TRUE(VmRemovalEnd(*ds, instance, "b"));  // not b's mark
  EXPECT_TRUE(VmRemovalInProgress(*ds, instance).value());
  ASSERT_TRUE(VmRemovalEnd(*ds, instance, "a"));
  EXPECT_FALSE(VmRemovalInProgress(*ds, instance).value());
  // A mark whose server died amid the removal expires.
  EXPECT_TRUE(VmRemovalBeginIf(*ds, instance, "b", 10 * kSecond, orphan).value());
  clock->Advance(10 * kSecond + 1);
  EXPECT_FALSE(VmRemovalInProgress(*ds, instance).value());
  EXPECT_TRUE(VmRemovalBeginIf(*ds, instance, "a", 10 * kSecond, orphan).value());
}

// The sled watcher's writes carry its lease's fencing token: once another server took the lease
// over, a judgement the former holder was still writing changes nothing.
TEST_F(LeasesTest, AWriteFencedByATaskLeaseChangesNothingOnceAnotherServerHoldsIt) {
  const Sled sled =
      SledUpsert(*ds, "BRM0001", "http://127.0.0.1:7001", IpAddr::Parse("fd00::1").value()).value();
  const LeaseFence a{"sled-watcher", "a"};
  const LeaseFence b{"sled-watcher", "b"};
  ASSERT_TRUE(TaskLeaseAcquire(*ds, "sled-watcher", "a", 3 * kSecond).value());
  auto held = SledRecordAgent(*ds, sled.id, false, &a);
  ASSERT_TRUE(held) << held.error().message();
  EXPECT_TRUE(*held);
  // a pauses past its lease; b takes the task over.
  clock->Advance(3 * kSecond + 1);
  ASSERT_TRUE(TaskLeaseAcquire(*ds, "sled-watcher", "b", 3 * kSecond).value());
  auto late = SledRecordAgent(*ds, sled.id, true, &a);
  ASSERT_TRUE(FencedOut(late));
  EXPECT_EQ(
      late.error().message(),
      "this server no longer holds the sled-watcher lease (another server took it over, or it "
      "was given up): the lease's holder does that work");
  EXPECT_EQ(SledGet(*ds, sled.id).value().agent_answers, false);
  EXPECT_TRUE(SledRecordAgent(*ds, sled.id, true, &b).value());
  EXPECT_EQ(SledGet(*ds, sled.id).value().agent_answers, true);
  // The instance's run state and an orphan's removal mark alike (the fence comes first: a's
  // answer is not the missing instance's NotFound).
  auto run = InstanceRecordRunState(*ds, Uuid::Random(), RunState::kFailed, nullptr, &a);
  ASSERT_TRUE(FencedOut(run));
  EXPECT_EQ(
      InstanceRecordRunState(*ds, Uuid::Random(), RunState::kFailed, nullptr, &b).error().kind(),
      ErrorKind::kNotFound);
  const Uuid orphan_vm = Uuid::Random();
  auto orphan = [](const std::optional<Instance>& i) { return !i.has_value(); };
  auto mark = VmRemovalBeginIf(*ds, orphan_vm, "a", 10 * kSecond, orphan, &a);
  ASSERT_TRUE(FencedOut(mark));
  EXPECT_FALSE(VmRemovalInProgress(*ds, orphan_vm).value());
  EXPECT_TRUE(VmRemovalBeginIf(*ds, orphan_vm, "b", 10 * kSecond, orphan, &b).value());
  // A lease given up at a clean stop fences its former holder's writes too.
  ASSERT_TRUE(TaskLeaseRelease(*ds, "sled-watcher", "b"));
  EXPECT_TRUE(FencedOut(SledRecordAgent(*ds, sled.id, false, &b)));
}

// A fence is a tenure's: a server that lost the lease and took it back holds it under a new
// name, so a judgement begun before the loss writes nothing after it. Lost twice here: the
// lease ran out by the server's clock (it was paused; nobody took it), then another server took
// it over and gave it up before the holder's renewal.
TEST_F(LeasesTest, ATenuresFenceNeverPassesTheWritesOfALaterTenure) {
  const Sled sled =
      SledUpsert(*ds, "BRM0001", "http://127.0.0.1:7001", IpAddr::Parse("fd00::1").value()).value();
  TaskLeaseKeeper a(*ds, "watch", "a", 4 * kSecond);
  ASSERT_TRUE(a.Held());
  const LeaseFence first = a.fence();
  EXPECT_EQ(first.holder, "a");
  ASSERT_TRUE(SledRecordAgent(*ds, sled.id, false, &first));
  clock->Advance(4 * kSecond + 1);
  ASSERT_TRUE(a.Held());
  const LeaseFence second = a.fence();
  EXPECT_EQ(second.holder, "a#1");
  auto stale = SledRecordAgent(*ds, sled.id, true, &first);
  ASSERT_TRUE(FencedOut(stale));
  ASSERT_TRUE(SledRecordAgent(*ds, sled.id, true, &second));
  // Server b takes the lease and gives it up while a, paused, still counts on it.
  ASSERT_TRUE(ds->Write([](Tx& tx) -> Status {
    FP_TRY(tx.Exec("UPDATE task_lease SET holder = 'b' WHERE task = 'watch'"));
    return Ok();
  }));
  ASSERT_TRUE(TaskLeaseRelease(*ds, "watch", "b"));
  clock->Advance(2 * kSecond + 1);  // half of a's lease left: its renewal finds the row gone
  ASSERT_TRUE(a.Held());
  EXPECT_EQ(a.fence().holder, "a#2");
  auto stale_again = SledRecordAgent(*ds, sled.id, false, &second);
  ASSERT_TRUE(FencedOut(stale_again));
  EXPECT_EQ(SledGet(*ds, sled.id).value().agent_answers, true);
  const LeaseFence third = a.fence();
  EXPECT_TRUE(SledRecordAgent(*ds, sled.id, false, &third).value());
}

// A server started again under the same coordinator id while its previous process is paused
// (not dead): each process names its tenures with a part of its own, so the new one takes the
// lease over at its first look, and the paused one's writes are refused from then on.
TEST_F(LeasesTest, ARestartedServersFirstTenureFencesItsPreviousProcess) {
  const Sled sled =
      SledUpsert(*ds, "BRM0001", "http://127.0.0.1:7001", IpAddr::Parse("fd00::1").value()).value();
  TaskLeaseKeeper before(*ds, "watch", "a", 4 * kSecond, "p1");
  ASSERT_TRUE(before.Held());
  const LeaseFence paused = before.fence();
  EXPECT_EQ(paused.holder, "a@p1");
  // Another server waits for the lease to run out; the server's next process does not.
  TaskLeaseKeeper other(*ds, "watch", "b", 4 * kSecond, "p9");
  EXPECT_FALSE(other.Held());
  TaskLeaseKeeper after(*ds, "watch", "a", 4 * kSecond, "p2");
  ASSERT_TRUE(after.Held());
  const LeaseFence now = after.fence();
  EXPECT_EQ(now.holder, "a@p2");
  auto stale = SledRecordAgent(*ds, sled.id, true, &paused);
  ASSERT_TRUE(FencedOut(stale));
  EXPECT_TRUE(SledRecordAgent(*ds, sled.id, true, &now).value());
  // Resumed, the paused process's renewal finds the row taken, and its next tenure waits.
  clock->Advance(2 * kSecond + 1);
  ASSERT_TRUE(after.Held());
  EXPECT_FALSE(before.Held());
  EXPECT_EQ(after.fence().holder, "a@p2");
}

// Only the server's own earlier processes: a server whose id begins with another's and "@" is
// another server, whose live lease the first waits for.
TEST_F(LeasesTest, AServerWhoseIdBeginsWithAnothersIsNotItsEarlierProcess) {
  TaskLeaseKeeper other(*ds, "watch", "a@b", 4 * kSecond, "p1");
  ASSERT_TRUE(other.Held());
  EXPECT_EQ(other.fence().holder, "a@b@p1");
  TaskLeaseKeeper a(*ds, "watch", "a", 4 * kSecond, "p2");
  EXPECT_FALSE(a.Held());
  clock->Advance(4 * kSecond + 1);  // other's lease ran out: a takes it as any server would
  EXPECT_TRUE(a.Held());
  EXPECT_EQ(a.fence().holder, "a@p2");
}

}  // namespace
}  // namespace fp::db
