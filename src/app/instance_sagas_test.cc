// Oxide's saga scaffolds (omicron-behaviour.md §7.3) for the instance sagas, against the real
// datastore and simulated agents over HTTP on loopback: failure at each node unwinds to a
// clean slate with no stuck saga; every action run twice gives the same result; an undo run
// twice still unwinds cleanly.

#include <gtest/gtest.h>

#include <set>

#include "agents/sim/sled_agent_sim.h"
#include "agents/sim/switch_agent_sim.h"
#include "agents/testing/wait_for.h"
#include "app/instances.h"
#include "db/saga_log.h"
#include "db/testing/temp_datastore.h"

namespace fp::app {
namespace {

using db::testing::ByName;
using db::testing::Range;
using db::testing::TempDatastore;

// Everything observable about the instances: the datastore, the switch and the sleds.
struct World {
  std::vector<std::string> instances;  // id/state/run_state/sled/migration
  std::vector<std::string> external_ips;
  std::vector<std::string> nat_rows;
  std::vector<std::string> switch_nat;
  std::vector<std::string> sled_vms;
  double remaining = 0;

  bool operator==(const World&) const = default;
};

std::ostream& operator<<(std::ostream& os, const World& w) {
  auto list = [&](const char* name, const std::vector<std::string>& v) {
    os << name << ": [";
    for (const auto& s : v) os << s << "; ";
    os << "] ";
  };
  list("instances", w.instances);
  list("external_ips", w.external_ips);
  list("nat_rows", w.nat_rows);
  list("switch", w.switch_nat);
  list("sleds", w.sled_vms);
  return os << "remaining: " << w.remaining;
}

class InstanceSagaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db::SiloCreate sc;
    sc.id = Uuid::Random();
    sc.name = "s1";
    sc.description = "";
    silo_ = *ds->SiloCreate(sc);
    actor_ = Actor{Uuid::Random(), silo_.id, db::Role::kFleetAdmin};
    ASSERT_TRUE(ds->ProjectCreate(Uuid::Random(), silo_.id, "p1", ""));
    db::PoolCreate pc;
    pc.id = Uuid::Random();
    pc.name = "v4";
    pc.description = "";
    pool_ = *ds->PoolCreate(pc);
    ASSERT_TRUE(ds->RangeAdd(pool_.id, Uuid::Random(), Range("10.0.0.0", "10.0.0.7")));
    ASSERT_TRUE(ds->Link(pool_.id, NameOrId(silo_.id), true));

    switch_sim_ = *agents::sim::SwitchAgentSim::Start({});
    switch_client_ = agents::MakeSwitchAgentClient(switch_sim_->base_url(), 2000);
    dataplane_.switch_agent = switch_client_.get();
    for (int i = 0; i < 2; ++i) {
      sled_sims_.push_back(*agents::sim::SledAgentSim::Start({}));
      IpAddr underlay(IpVersion::kV6, (uint128{0xfd00} << 112) | uint128(0x101 + i));
      db::Sled sled = *db::SledUpsert(*ds, "sled-" + std::to_string(i),
                                      sled_sims_.back()->base_url(), underlay);
      sled_ids_.push_back(sled.id);
      sled_clients_.push_back(agents::MakeSledAgentClient(sled_sims_.back()->base_url(), 2000));
      dataplane_.sleds[sled.id] = sled_clients_.back().get();
    }
    nat_ = std::make_unique<nat::NatReconciler>(*ds, *switch_client_);
    deps_ = std::make_unique<InstanceSagaDeps>(InstanceSagaDeps{*ds, dataplane_, *nat_});
    RegisterInstanceActions(registry_, *deps_);
    RegisterExternalIpActions(registry_, *deps_);
    exec_ = std::make_unique<saga::SagaExecutor>(*ds, registry_, "test-sec");
    cp_ = std::make_unique<ControlPlane>(*ds);
    instances_ = std::make_unique<Instances>(*ds, *cp_, dataplane_, *nat_, *exec_);
  }

  InstanceCreateParams Params(const std::string& name, bool start) {
    InstanceCreateParams p;
    p.name = name;
    p.hostname = name;
    p.memory = 1 << 30;
    p.nic = db::NicKind::kDualStack;
    p.start = start;
    return p;
  }

  World Observe() {
    World w;
    auto rows = ds->Read<World>([&](db::Tx& tx) -> Result<World> {
      World out;
      for (const auto& r : FP_TRY(tx.Query(
               "SELECT id, state, run_state, coalesce(sled_id, '-'), coalesce(migration_id, '-') "
               "FROM instance WHERE time_deleted IS NULL ORDER BY id"))) {
        out.instances.push_back(r.Text(0) + "/" + r.Text(1) + "/" + r.Text(2) + "/" + r.Text(3) +
                                "/" + r.Text(4));
      }
      for (const auto& r : FP_TRY(
               tx.Query("SELECT id, kind, state, coalesce(parent_id, '-') FROM external_ip WHERE "
                        "time_deleted IS NULL ORDER BY id"))) {
        out.external_ips.push_back(r.Text(0) + "/" + r.Text(1) + "/" + r.Text(2) + "/" + r.Text(3));
      }
      return out;
    });
    EXPECT_TRUE(rows) << rows.error().message();
    w = *rows;
    for (const auto& n : *db::NatLive(*ds)) {
      w.nat_rows.push_back(n.external_ip.ToString() + ":" + std::to_string(n.first_port) + "->" +
                           n.sled_address.ToString());
    }
    for (const auto& e : switch_sim_->Nat().entries) {
      w.switch_nat.push_back(e.external_ip.ToString() + ":" + std::to_string(e.first_port) + "->" +
                             e.sled_address.ToString());
    }
    std::sort(w.switch_nat.begin(), w.switch_nat.end());
    for (size_t i = 0; i < sled_sims_.size(); ++i) {
      for (const auto& vm : sled_sims_[i]->Instances()) {
        w.sled_vms.push_back(std::to_string(i) + ":" + vm.id.ToString() + "/" +
                             std::string(agents::ToString(vm.state)));
      }
    }
    std::sort(w.sled_vms.begin(), w.sled_vms.end());
    w.remaining = ds->Utilization(pool_.id)->remaining;
    return w;
  }

  void ExpectNoSagaStuckOrUnfinished() {
    for (const auto& s : *db::SagaListStates(*ds, 1000)) {
      EXPECT_NE(s.state, db::SagaState::kStuck) << s.name << " " << s.id.ToString();
      EXPECT_NE(s.state, db::SagaState::kRunning) << s.name << " " << s.id.ToString();
      EXPECT_NE(s.state, db::SagaState::kUnwinding) << s.name << " " << s.id.ToString();
    }
  }

  db::Instance Running(const std::string& name) {
    auto created = instances_->Create(actor_, ByName("p1"), Params(name, true));
    EXPECT_TRUE(created) << created.error().message();
    EXPECT_TRUE(agents::testing::WaitFor([&] {
      instances_->WatchOnce();
      return instances_->Lookup(actor_, NameOrId(created->id), std::nullopt)->run_state ==
             "running";
    }));
    return *instances_->Lookup(actor_, NameOrId(created->id), std::nullopt);
  }

  void Faults(std::string saga, saga::FaultPlan plan) {
    plan.saga_name = std::move(saga);
    exec_->SetFaultPlanForTest(plan);
  }

  TempDatastore ds;
  db::Silo silo_;
  db::IpPool pool_;
  Actor actor_;
  std::unique_ptr<agents::sim::SwitchAgentSim> switch_sim_;
  std::unique_ptr<agents::SwitchAgentClient> switch_client_;
  std::vector<std::unique_ptr<agents::sim::SledAgentSim>> sled_sims_;
  std::vector<std::unique_ptr<agents::SledAgentClient>> sled_clients_;
  std::vector<Uuid> sled_ids_;
  Dataplane dataplane_;
  std::unique_ptr<nat::NatReconciler> nat_;
  std::unique_ptr<InstanceSagaDeps> deps_;
  saga::ActionRegistry registry_;
  std::unique_ptr<saga::SagaExecutor> exec_;
  std::unique_ptr<ControlPlane> cp_;
  std::unique_ptr<Instances> instances_;
};

constexpr int kCreateNodes = 3;
constexpr int kStartNodes = 4;
constexpr int kMigrateNodes = 5;

TEST_F(InstanceSagaTest, CreateFailingAtEachNodeLeavesACleanSlate) {
  World before = Observe();
  for (int node = 0; node < kCreateNodes; ++node) {
    Faults("instance_create", {.fail_node = node});
    auto r = instances_->Create(actor_, ByName("p1"), Params("vm", false));
    ASSERT_FALSE(r) << "node " << node;
    EXPECT_NE(r.error().message().find("injected failure at node " + std::to_string(node)),
              std::string::npos)
        << r.error().message();
    EXPECT_EQ(Observe(), before) << "after failing node " << node;
  }
  ExpectNoSagaStuckOrUnfinished();
}

TEST_F(InstanceSagaTest, CreateUndoRunTwiceStillCleans) {
  World before = Observe();
  for (int node = 1; node < kCreateNodes; ++node) {
    Faults("instance_create", {.fail_node = node, .repeat_undo_node = node - 1});
    ASSERT_FALSE(instances_->Create(actor_, ByName("p1"), Params("vm", false)));
    EXPECT_EQ(Observe(), before) << "after failing node " << node;
  }
  ExpectNoSagaStuckOrUnfinished();
}

TEST_F(InstanceSagaTest, CreateWithEveryActionTwiceGivesOneInstanceAndOneSnat) {
  Faults("instance_create", {.repeat_every_action = true});
  auto r = instances_->Create(actor_, ByName("p1"), Params("vm", false));
  ASSERT_TRUE(r) << r.error().message();
  World w = Observe();
  EXPECT_EQ(w.instances.size(), 1u);
  ASSERT_EQ(w.external_ips.size(), 1u);
  EXPECT_NE(w.external_ips[0].find("/snat/attached/"), std::string::npos);
  EXPECT_EQ(w.remaining, 7.0);
}

TEST_F(InstanceSagaTest, StartFailingAtEachNodeLeavesACleanSlate) {
  auto vm = *instances_->Create(actor_, ByName("p1"), Params("vm", false));
  World before = Observe();
  for (int node = 0; node < kStartNodes; ++node) {
    Faults("instance_start", {.fail_node = node});
    auto r = instances_->Start(actor_, NameOrId(vm.id), std::nullopt);
    ASSERT_FALSE(r) << "node " << node;
    EXPECT_EQ(Observe(), before) << "after failing node " << node;
  }
  for (int node = 1; node < kStartNodes; ++node) {
    Faults("instance_start", {.fail_node = node, .repeat_undo_node = node - 1});
    ASSERT_FALSE(instances_->Start(actor_, NameOrId(vm.id), std::nullopt));
    EXPECT_EQ(Observe(), before) << "undo twice, after failing node " << node;
  }
  ExpectNoSagaStuckOrUnfinished();
}

TEST_F(InstanceSagaTest, StartWithEveryActionTwiceRunsOnceEverywhere) {
  auto vm = *instances_->Create(actor_, ByName("p1"), Params("vm", false));
  Faults("instance_start", {.repeat_every_action = true});
  auto r = instances_->Start(actor_, NameOrId(vm.id), std::nullopt);
  ASSERT_TRUE(r) << r.error().message();
  World w = Observe();
  EXPECT_EQ(w.sled_vms.size(), 1u);
  EXPECT_EQ(w.nat_rows.size(), 1u);
  EXPECT_EQ(w.switch_nat, w.nat_rows);
}

TEST_F(InstanceSagaTest, DeleteFailingLeavesTheInstanceUntouched) {
  auto vm = *instances_->Create(actor_, ByName("p1"), Params("vm", false));
  World before = Observe();
  Faults("instance_delete", {.fail_node = 0});
  ASSERT_FALSE(instances_->Delete(actor_, NameOrId(vm.id), std::nullopt));
  EXPECT_EQ(Observe(), before);
  Faults("instance_delete", {.repeat_every_action = true});
  ASSERT_TRUE(instances_->Delete(actor_, NameOrId(vm.id), std::nullopt));
  World after = Observe();
  EXPECT_TRUE(after.instances.empty());
  EXPECT_TRUE(after.external_ips.empty());
  EXPECT_EQ(after.remaining, 8.0);
  ExpectNoSagaStuckOrUnfinished();
}

TEST_F(InstanceSagaTest, DeleteOfARunningInstanceChangesNothing) {
  db::Instance vm = Running("vm");
  World before = Observe();
  auto r = instances_->Delete(actor_, NameOrId(vm.id), std::nullopt);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find(
                "cannot delete instance: instance is running or has not yet fully stopped"),
            std::string::npos);
  EXPECT_EQ(Observe(), before);
  EXPECT_FALSE(before.switch_nat.empty());
}

TEST_F(InstanceSagaTest, MigrateFailingAtEachNodeLeavesItRunningWhereItWas) {
  db::Instance vm = Running("vm");
  Uuid dst = *vm.sled_id == sled_ids_[0] ? sled_ids_[1] : sled_ids_[0];
  World before = Observe();
  for (int node = 0; node < kMigrateNodes; ++node) {
    Faults("instance_migrate", {.fail_node = node});
    ASSERT_FALSE(instances_->Migrate(actor_, NameOrId(vm.id), std::nullopt, dst)) << node;
    EXPECT_EQ(Observe(), before) << "after failing node " << node;
  }
  for (int node = 1; node < kMigrateNodes; ++node) {
    Faults("instance_migrate", {.fail_node = node, .repeat_undo_node = node - 1});
    ASSERT_FALSE(instances_->Migrate(actor_, NameOrId(vm.id), std::nullopt, dst)) << node;
    EXPECT_EQ(Observe(), before) << "undo twice, after failing node " << node;
  }
  ExpectNoSagaStuckOrUnfinished();
}

TEST_F(InstanceSagaTest, MigrateWithEveryActionTwiceMovesTheInstanceAndItsNat) {
  db::Instance vm = Running("vm");
  Uuid dst = *vm.sled_id == sled_ids_[0] ? sled_ids_[1] : sled_ids_[0];
  Faults("instance_migrate", {.repeat_every_action = true});
  auto moved = instances_->Migrate(actor_, NameOrId(vm.id), std::nullopt, dst);
  ASSERT_TRUE(moved) << moved.error().message();
  EXPECT_EQ(moved->sled_id, dst);
  World w = Observe();
  size_t dst_index = dst == sled_ids_[0] ? 0 : 1;
  ASSERT_EQ(w.sled_vms.size(), 1u);
  EXPECT_EQ(w.sled_vms[0].substr(0, 1), std::to_string(dst_index));
  auto sled = *db::SledGet(*ds, dst);
  ASSERT_EQ(w.switch_nat.size(), 1u);
  EXPECT_NE(w.switch_nat[0].find(sled.underlay_address.ToString()), std::string::npos);
  EXPECT_EQ(w.switch_nat, w.nat_rows);
}

}  // namespace
}  // namespace fp::app
