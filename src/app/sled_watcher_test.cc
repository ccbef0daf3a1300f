// The sled watcher's reaper: sleds converge on what the datastore places on them, and a
// removal is ordered against a placement of the same instance.

#include <gtest/gtest.h>

#include <thread>

#include "app/testing/instance_world.h"

namespace fp::app {
namespace {

using db::testing::ByName;
using testing::InstanceSagaTest;

// --- Sleds converge on the datastore (issue 10, defect 3) ---

class SledConvergenceTest : public InstanceSagaTest {
 protected:
  static constexpr std::string_view kUnregister = "DELETE /instances/*";

  size_t SledIndexOf(const model::Instance& i) {
    for (size_t k = 0; k < sled_ids_.size(); ++k) {
      if (i.sled_id == sled_ids_[k]) return k;
    }
    ADD_FAILURE() << "instance " << i.id.ToString() << " is on no known sled";
    return 0;
  }

  std::optional<agents::SledInstance> VmOn(size_t k, const Uuid& id) {
    return sled_sims_[k]->Instance(id);
  }

  // Stops the running instance while sled `k` refuses every unregister: the instance is
  // stopped in the datastore and its stopped VM stays on the sled. Faults are cleared after.
  void StopWhileUnregisterFails(const model::Instance& vm, size_t k) {
    sled_sims_[k]->faults().Add({.endpoint = std::string(kUnregister), .fail_next = 1000});
    ASSERT_TRUE(instances_->Stop(actor_, NameOrId(vm.id), std::nullopt));
    ASSERT_TRUE(fp::testing::WaitFor([&] {
      watcher_->WatchOnce();
      return instances_->Lookup(actor_, NameOrId(vm.id), std::nullopt)->run_state == "stopped";
    }));
    ASSERT_TRUE(VmOn(k, vm.id)) << "the failed unregister left the VM on its sled";
    EXPECT_EQ(VmOn(k, vm.id)->state, agents::VmState::kStopped);
    sled_sims_[k]->faults().Clear();
  }
};

TEST_F(SledConvergenceTest, TheReaperRemovesAStoppedVmWhoseUnregisterFailed) {
  model::Instance vm = Running("vm");
  size_t k = SledIndexOf(vm);
  StopWhileUnregisterFails(vm, k);
  watcher_->ReapOrphans();
  EXPECT_FALSE(VmOn(k, vm.id)) << "the stopped instance's VM is still on its sled";
}

TEST_F(SledConvergenceTest, ADeletedInstancesVmsAreRemovedFromEverySled) {
  model::Instance vm = Running("vm");
  size_t k = SledIndexOf(vm);
  StopWhileUnregisterFails(vm, k);
  // And a copy on the other sled, as a start call the sled applied after its saga gave up.
  size_t other = 1 - k;
  ASSERT_TRUE(sled_clients_[other]->EnsureRunning(*BuildInstanceSpec(*ds, vm.id)));
  ASSERT_TRUE(instances_->Delete(actor_, NameOrId(vm.id), std::nullopt));
  watcher_->ReapOrphans();
  EXPECT_FALSE(VmOn(k, vm.id));
  EXPECT_FALSE(VmOn(other, vm.id));
}

// The reaper judges a leftover stopped VM an orphan, and while its unregister is on the wire a
// start places the instance on that same sled again: the start's registration must come after
// the unregister, or the new VM is taken away and the instance never runs.
TEST_F(SledConvergenceTest, ARemovalInFlightIsOrderedBeforeANewStartOnTheSameSled) {
  model::Instance vm = Running("vm");
  size_t k = SledIndexOf(vm);
  StopWhileUnregisterFails(vm, k);
  sled_sims_[k]->faults().Add({.endpoint = std::string(kUnregister), .delay_ms = 1500});
  std::thread reaper([&] { watcher_->ReapOrphans(); });
  bool removing = fp::testing::WaitFor([&] { return sled_sims_[k]->faults().held_calls() == 1; });
  Result<model::Instance> started = Fail(Error::Internal("not started"));
  if (removing) started = instances_->Start(actor_, NameOrId(vm.id), std::nullopt);
  reaper.join();
  ASSERT_TRUE(removing) << "the reaper did not take the leftover VM for an orphan";
  ASSERT_TRUE(started) << started.error().message();
  ASSERT_EQ(started->sled_id, sled_ids_[k]) << "placed on the other sled: nothing to order";
  sled_sims_[k]->faults().Clear();
  EXPECT_TRUE(fp::testing::WaitFor([&] {
    watcher_->WatchOnce();
    return instances_->Lookup(actor_, NameOrId(vm.id), std::nullopt)->run_state == "running";
  })) << Observe();
  EXPECT_TRUE(VmOn(k, vm.id));
}

// The same with two servers on one datastore: server B's watcher (its own process, so its own
// in-memory ordering) removes the leftover VM while server A starts the instance on the same
// sled. A's placement must wait for B's removal, which it learns of from the datastore.
TEST_F(SledConvergenceTest, ARemovalByAnotherServerIsOrderedBeforeANewStartOnTheSameSled) {
  model::Instance vm = Running("vm");
  size_t k = SledIndexOf(vm);
  StopWhileUnregisterFails(vm, k);
  Dataplane other_dataplane;  // server B's: the same agents, its own VmRemovals
  other_dataplane.switch_agent = dataplane_.switch_agent;
  other_dataplane.sleds = dataplane_.sleds;
  SledWatcher other_watcher(*ds, other_dataplane, *nat_);
  sled_sims_[k]->faults().Add({.endpoint = std::string(kUnregister), .delay_ms = 1500});
  std::thread reaper([&] { other_watcher.ReapOrphans(); });
  bool removing = fp::testing::WaitFor([&] { return sled_sims_[k]->faults().held_calls() == 1; });
  Result<model::Instance> started = Fail(Error::Internal("not started"));
  if (removing) started = instances_->Start(actor_, NameOrId(vm.id), std::nullopt);
  reaper.join();
  ASSERT_TRUE(removing) << "server B's reaper did not take the leftover VM for an orphan";
  ASSERT_TRUE(started) << started.error().message();
  ASSERT_EQ(started->sled_id, sled_ids_[k]) << "placed on the other sled: nothing to order";
  sled_sims_[k]->faults().Clear();
  EXPECT_TRUE(fp::testing::WaitFor([&] {
    watcher_->WatchOnce();
    return instances_->Lookup(actor_, NameOrId(vm.id), std::nullopt)->run_state == "running";
  })) << Observe();
  EXPECT_TRUE(VmOn(k, vm.id));
}

}  // namespace
}  // namespace fp::app
