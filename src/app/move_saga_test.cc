// Moving an attached floating IP to another instance in one saga (issue 25, item 4), with the
// saga scaffolds of instance_sagas_test.cc: the address is on one instance everywhere (the
// database, the switch's NAT, the sleds' ports) after each step, a failure at any node gives it
// back where it was, and every action run twice moves it once.

#include <gtest/gtest.h>

#include "app/sagas/ip_attach.h"
#include "app/testing/instance_world.h"
#include "db/sleds.h"

namespace fp::app {
namespace {

using db::testing::ByName;
using testing::AttachSagaTest;
using testing::World;

// A move runs the attach saga, from the instance the IP leaves.
const int kMoveNodes = static_cast<int>(IpAttachNodes().size());

class MoveSagaTest : public AttachSagaTest {
 protected:
  Result<model::ExternalIp> Move(const model::Instance& to, const model::ExternalIp& fip) {
    return instances_->AttachFloating(Unrecorded{actor_}, NameOrId(fip.id), std::nullopt,
                                      NameOrId(to.id), true);
  }

  // Where the address of `fip` is, as every place sees it: the sled its NAT row and the
  // switch's entry point at (underlay addresses), and the instances whose VMs list it.
  struct Where {
    std::vector<std::string> nat;
    std::vector<std::string> switch_nat;
    std::vector<Uuid> vms;
  };
  Where Locate(const model::ExternalIp& fip) {
    Where w;
    World world = Observe();
    const std::string key = fip.ip.ToString() + ":";
    for (const auto& n : world.nat_rows) {
      if (n.rfind(key, 0) == 0) w.nat.push_back(n.substr(n.find("->") + 2));
    }
    for (const auto& n : world.switch_nat) {
      if (n.rfind(key, 0) == 0) w.switch_nat.push_back(n.substr(n.find("->") + 2));
    }
    for (const auto& sim : sled_sims_) {
      for (const auto& vm : sim->Instances()) {
        for (const auto& ip : vm.external_ips) {
          if (ip == fip.ip) w.vms.push_back(vm.id);
        }
      }
    }
    return w;
  }

  // Running instances "a" and "b" (one per sled) and floating IP "web" attached to "a".
  struct Pair {
    model::Instance a, b;
    model::ExternalIp fip;
  };
  Pair APairWithTheIpOnA() {
    Pair p{Running("a"), Running("b"), Fip("web")};
    EXPECT_TRUE(Attach("floating", p.a, &p.fip));
    return p;
  }

  std::string Underlay(const model::Instance& vm) {
    return db::SledGet(*ds, *vm.sled_id)->underlay_address.ToString();
  }

  // Asserts that the address is attached to `vm` in the database and in every other place.
  void ExpectOn(const model::ExternalIp& fip, const model::Instance& vm, const std::string& what) {
    auto row = db::FloatingIpLookupById(*ds, silo_.id, fip.id);
    ASSERT_TRUE(row) << what;
    EXPECT_EQ(row->parent_id, vm.id) << what;
    EXPECT_EQ(row->state, model::AttachState::kAttached) << what;
    Where w = Locate(fip);
    EXPECT_EQ(w.nat, std::vector<std::string>{Underlay(vm)}) << what;
    EXPECT_EQ(w.switch_nat, std::vector<std::string>{Underlay(vm)}) << what;
    EXPECT_EQ(w.vms, std::vector<Uuid>{vm.id}) << what;
  }
};

TEST_F(MoveSagaTest, AnAttachedFloatingIpMovesOnlyWhenTheCallerOptsIn) {
  model::Instance a = Running("a");
  model::Instance b = Running("b");
  ASSERT_NE(a.sled_id, b.sled_id) << "placement spreads the two instances over the two sleds";
  model::ExternalIp fip = Fip("web");
  ASSERT_TRUE(Attach("floating", a, &fip));
  World before = Observe();

  auto refused = Attach("floating", b, &fip);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().kind(), ErrorKind::kInvalidRequest);
  EXPECT_NE(refused.error().message().find("is attached to instance \"a\"; detach it first, or "
                                           "attach with \"allow_reassociation\": true"),
            std::string::npos)
      << refused.error().message();
  EXPECT_EQ(Observe(), before);

  auto moved = Move(b, fip);
  ASSERT_TRUE(moved) << moved.error().message();
  EXPECT_EQ(moved->parent_id, b.id);
  EXPECT_EQ(moved->state, model::AttachState::kAttached);
  ExpectOn(fip, b, "after the move");
  watcher_->WatchOnce();
  ExpectOn(fip, b, "after a watcher pass");
  // Moving it to where it is changes nothing; moving it back is another move.
  ASSERT_TRUE(Move(b, fip));
  ExpectOn(fip, b, "after moving it to where it is");
  ASSERT_TRUE(Move(a, fip));
  ExpectOn(fip, a, "after moving it back");
  ExpectNoSagaStuckOrUnfinished();
}

// The switch gets the move as one batch, the old entry's removal and the new one's addition
// together, and holds the address throughout: it never removes it first.
TEST_F(MoveSagaTest, TheSwitchRetargetsTheAddressInOneChange) {
  auto [a, b, fip] = APairWithTheIpOnA();
  auto version = db::NatCurrentVersion(*ds);
  ASSERT_TRUE(version);
  ASSERT_TRUE(Move(b, fip));
  auto feed = db::NatChangesSince(*ds, *version, 100);
  ASSERT_TRUE(feed);
  ASSERT_EQ(feed->changes.size(), 2u);
  EXPECT_TRUE(feed->changes[0].deleted);
  EXPECT_EQ(feed->changes[0].row.sled_address.ToString(), Underlay(a));
  EXPECT_FALSE(feed->changes[1].deleted);
  EXPECT_EQ(feed->changes[1].row.sled_address.ToString(), Underlay(b));
  EXPECT_EQ(feed->changes[1].version, feed->changes[0].version + 1);
}

TEST_F(MoveSagaTest, AMoveFailingAtEachNodeLeavesTheIpWhereItWas) {
  auto [a, b, fip] = APairWithTheIpOnA();
  World before = Observe();
  for (int node = 0; node < kMoveNodes; ++node) {
    Faults("ip_attach", {.fail_node = node});
    ASSERT_FALSE(Move(b, fip)) << "node " << node;
    EXPECT_EQ(Observe(), before) << "after failing node " << node;
    Faults("ip_attach", {.fail_node_after_effect = node});
    ASSERT_FALSE(Move(b, fip)) << "node " << node;
    EXPECT_EQ(Observe(), before) << "after failing node " << node << " after its effect";
  }
  for (int node = 1; node < kMoveNodes; ++node) {
    Faults("ip_attach", {.fail_node = node, .repeat_undo_node = node - 1});
    ASSERT_FALSE(Move(b, fip)) << "node " << node;
    EXPECT_EQ(Observe(), before) << "undo twice, after failing node " << node;
  }
  ExpectOn(fip, a, "after every failed move");
  ExpectNoSagaStuckOrUnfinished();
}

TEST_F(MoveSagaTest, AMoveWithEveryActionTwiceMovesItOnce) {
  auto [a, b, fip] = APairWithTheIpOnA();
  Faults("ip_attach", {.repeat_every_action = true});
  auto moved = Move(b, fip);
  ASSERT_TRUE(moved) << moved.error().message();
  ExpectOn(fip, b, "after the move");
  // And its undo, run twice after each action ran twice, puts it back.
  Faults("ip_attach",
         {.fail_node = kMoveNodes - 1, .repeat_every_action = true, .repeat_undo_node = 0});
  ASSERT_FALSE(Move(a, fip));
  ExpectOn(fip, b, "after a failed move back");
}

TEST_F(MoveSagaTest, AMoveToOrFromAStoppedInstanceProgramsOnlyTheRunningOne) {
  model::Instance a = Running("a");
  auto stopped = *instances_->Create(Unrecorded{actor_}, ByName("p1"), Params("stopped", false));
  model::ExternalIp fip = Fip("web");
  ASSERT_TRUE(Attach("floating", a, &fip));
  ASSERT_TRUE(Move(stopped, fip));
  Where w = Locate(fip);
  EXPECT_TRUE(w.nat.empty() && w.switch_nat.empty() && w.vms.empty())
      << "a stopped instance's address is programmed nowhere";
  EXPECT_EQ(db::FloatingIpLookupById(*ds, silo_.id, fip.id)->parent_id, stopped.id);
  ASSERT_TRUE(Move(a, fip));
  ExpectOn(fip, a, "moved back from the stopped instance");
}

// The instance the IP moves to is deleted between the first node and the rest: the move
// fails as an attach to a deleted instance does, and the address is left detached (the old
// instance's port gave it up too), not attached to a deleted instance nor twice.
TEST_F(MoveSagaTest, TheTargetDeletedMidMoveLeavesTheIpDetachedEverywhere) {
  model::Instance a = Running("a");
  auto b = *instances_->Create(Unrecorded{actor_}, ByName("p1"), Params("b", false));
  model::ExternalIp fip = Fip("web");
  ASSERT_TRUE(Attach("floating", a, &fip));
  Faults("ip_attach",
         {.call_after_node = 0, .after_node_call = [&] {
            ASSERT_TRUE(instances_->Delete(Unrecorded{actor_}, NameOrId(b.id), std::nullopt));
          }});
  auto moved = Move(b, fip);
  ASSERT_FALSE(moved);
  EXPECT_EQ(moved.error().kind(), ErrorKind::kNotFound) << moved.error().message();
  auto row = db::FloatingIpLookupById(*ds, silo_.id, fip.id);
  EXPECT_FALSE(row->parent_id);
  EXPECT_EQ(row->state, model::AttachState::kDetached);
  Where w = Locate(fip);
  EXPECT_TRUE(w.nat.empty() && w.switch_nat.empty() && w.vms.empty());
  ExpectNoSagaStuckOrUnfinished();
}

// The instance the IP moves from is stopped or deleted while the move runs, then the move
// fails: its undo cannot give the IP back to an instance that no longer runs there, so it
// leaves it detached.
TEST_F(MoveSagaTest, AFailedMoveGivesTheIpBackOnlyToAnInstanceThatCanTakeIt) {
  model::Instance b = Running("b");
  model::ExternalIp fip = Fip("web");
  for (const std::string change : {"delete", "stop"}) {
    model::Instance a = Running("a-" + change);
    ASSERT_TRUE(Attach("floating", a, &fip)) << change;
    Faults("ip_attach",
           {.fail_node = kMoveNodes - 1, .call_after_node = 0, .after_node_call = [&] {
              if (change == "delete") {
                // A running instance cannot be deleted: take it down the way an operator's
                // stop would first (its sled forgets it), then delete it.
                ASSERT_TRUE(instances_->Stop(Unrecorded{actor_}, NameOrId(a.id), std::nullopt));
                ASSERT_TRUE(fp::testing::WaitFor([&] {
                  watcher_->WatchOnce();
                  return instances_->Lookup(actor_, NameOrId(a.id), std::nullopt)->state ==
                         model::InstanceState::kNoVmm;
                }));
                ASSERT_TRUE(instances_->Delete(Unrecorded{actor_}, NameOrId(a.id), std::nullopt));
              } else {
                ASSERT_TRUE(instances_->Stop(Unrecorded{actor_}, NameOrId(a.id), std::nullopt));
              }
            }});
    ASSERT_FALSE(Move(b, fip)) << change;
    auto row = db::FloatingIpLookupById(*ds, silo_.id, fip.id);
    EXPECT_FALSE(row->parent_id) << change;
    EXPECT_EQ(row->state, model::AttachState::kDetached) << change;
    watcher_->WatchOnce();
    Where w = Locate(fip);
    EXPECT_TRUE(w.nat.empty()) << change;
    EXPECT_TRUE(w.switch_nat.empty()) << change;
    EXPECT_TRUE(w.vms.empty()) << change;
    Faults("ip_attach", {});
  }
  ExpectNoSagaStuckOrUnfinished();
}

// Either instance migrated while the move runs (between its first node and the rest): the
// source's migration takes its other addresses and not the moving one; the target's waits
// for the move (503), as it does for an attach under way. Either way the IP ends on the target,
// in every place.
TEST_F(MoveSagaTest, AMigrationOfEitherInstanceMidMoveLeavesTheIpOnTheTarget) {
  auto [a, b, fip] = APairWithTheIpOnA();
  // First a -> b while a (the source) migrates, then b -> a while a (the target) migrates.
  for (const bool source : {true, false}) {
    const model::Instance& vm = a;
    Status migrated = Ok();
    Faults("ip_attach", {.call_after_node = 0, .after_node_call = [&] {
                           auto now = *instances_->Lookup(actor_, NameOrId(vm.id), std::nullopt);
                           Uuid dst = *now.sled_id == sled_ids_[0] ? sled_ids_[1] : sled_ids_[0];
                           auto m = instances_->Migrate(Unrecorded{actor_}, NameOrId(vm.id),
                                                        std::nullopt, dst);
                           migrated = m ? Ok() : Status(Fail(m.error()));
                         }});
    const model::Instance& to = source ? b : a;
    auto moved = Move(to, fip);
    ASSERT_TRUE(moved) << moved.error().message();
    if (source) {
      EXPECT_TRUE(migrated) << migrated.error().message();
    } else {
      ASSERT_FALSE(migrated);
      EXPECT_EQ(migrated.error().kind(), ErrorKind::kServiceUnavailable)
          << migrated.error().message();
    }
    Faults("ip_attach", {});
    auto now = *instances_->Lookup(actor_, NameOrId(to.id), std::nullopt);
    ExpectOn(fip, now, source ? "moved to b while a migrated" : "moved to a, which migrated");
    watcher_->WatchOnce();
    ExpectOn(fip, now, "after a watcher pass");
  }
  ExpectNoSagaStuckOrUnfinished();
}

// The instance the IP would move from is stopping: the move waits for it (503), as a detach
// from it would.
TEST_F(MoveSagaTest, AMoveFromAnInstanceBetweenStatesIsRetriedLater) {
  auto [a, b, fip] = APairWithTheIpOnA();
  ASSERT_TRUE(instances_->Stop(Unrecorded{actor_}, NameOrId(a.id), std::nullopt));
  auto moved = Move(b, fip);
  ASSERT_FALSE(moved);
  EXPECT_EQ(moved.error().kind(), ErrorKind::kServiceUnavailable);
  EXPECT_NE(moved.error().message().find(
                "instance \"a\" is stopping; retry the move of floating IP \"web\" when it is "
                "running or stopped"),
            std::string::npos)
      << moved.error().message();
  EXPECT_EQ(db::FloatingIpLookupById(*ds, silo_.id, fip.id)->parent_id, a.id);
}

}  // namespace
}  // namespace fp::app
