#pragma once

// A world for tests of the instance sagas and the sled watcher: the real datastore (a temp
// file), a switch agent and two sled agents simulated over HTTP on loopback, the saga executor
// with every app saga registered, and the instances service; plus everything observable about
// it (World) to compare before and after.

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "agents/daemon/sled_agent.h"
#include "agents/daemon/switch_agent.h"
#include "app/instances.h"
#include "app/sagas/sagas.h"
#include "common/testing/wait_for.h"
#include "db/external_ips.h"
#include "db/instances.h"
#include "db/ip_pools.h"
#include "db/nat.h"
#include "db/projects.h"
#include "db/sagas.h"
#include "db/silos.h"
#include "db/sleds.h"
#include "db/testing/temp_datastore.h"
#include "loops/nat_reconciler.h"
#include "loops/sled_watcher.h"

namespace fp::app::testing {

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

inline std::ostream& operator<<(std::ostream& os, const World& w) {
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
    model::SiloCreate sc;
    sc.id = Uuid::Random();
    sc.name = "s1";
    sc.description = "";
    silo_ = *db::SiloCreate(*ds, sc);
    actor_ = Actor{Uuid::Random(), silo_.id, model::Role::kFleetAdmin};
    ASSERT_TRUE(db::ProjectCreate(*ds, Uuid::Random(), silo_.id, "p1", ""));
    model::PoolCreate pc;
    pc.id = Uuid::Random();
    pc.name = "v4";
    pc.description = "";
    pool_ = *db::PoolCreate(*ds, pc);
    ASSERT_TRUE(db::RangeAdd(*ds, pool_.id, Uuid::Random(), Range("10.0.0.0", "10.0.0.7")));
    ASSERT_TRUE(db::Link(*ds, pool_.id, NameOrId(silo_.id), true));

    switch_sim_ = *agents::daemon::SwitchAgentDaemon::Start({});
    switch_client_ = agents::MakeSwitchAgentClient(switch_sim_->base_url(), 2000);
    for (int i = 0; i < 2; ++i) {
      sled_sims_.push_back(*agents::daemon::SledAgentDaemon::Start({}));
      IpAddr underlay(IpVersion::kV6, (uint128{0xfd00} << 112) | uint128(0x101 + i));
      model::Sled sled = *db::SledUpsert(*ds, "sled-" + std::to_string(i),
                                         sled_sims_.back()->base_url(), underlay);
      sled_ids_.push_back(sled.id);
      sled_clients_.push_back(agents::MakeSledAgentClient(sled_sims_.back()->base_url(), 2000));
      sled_agents_.sleds[sled.id] = sled_clients_.back().get();
    }
    nat_ = std::make_unique<loops::NatReconciler>(*ds, *switch_client_);
    deps_ = std::make_unique<SagaDeps>(SagaDeps{*ds, sled_agents_, *nat_});
    RegisterSagaActions(registry_, *deps_);
    saga_store_ = std::make_unique<db::DatastoreSagaStore>(*ds);
    exec_ = std::make_unique<saga::SagaExecutor>(*saga_store_, registry_, "test-sec", ds->clock(),
                                                 ds->random());
    projects_ = std::make_unique<Projects>(*ds);
    floating_ips_ = std::make_unique<FloatingIps>(*ds);
    watcher_ = std::make_unique<loops::SledWatcher>(*ds, sled_agents_, *nat_);
    instances_ = std::make_unique<Instances>(*ds, *projects_, *floating_ips_, sled_agents_, *nat_,
                                             *exec_, *watcher_);
  }

  InstanceCreateParams Params(const std::string& name, bool start) {
    InstanceCreateParams p;
    p.name = name;
    p.hostname = name;
    p.memory = 1 << 30;
    p.nic = model::NicKind::kDualStack;
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
    auto nat_rows = db::NatLive(*ds);  // a named result: a range-for over *temporary dangles
    for (const auto& n : *nat_rows) {
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
        std::vector<std::string> sorted;
        for (const auto& ip : vm.external_ips) sorted.push_back(ip.ToString());
        std::sort(sorted.begin(), sorted.end());  // a re-added address may move in the list
        std::string ips;
        for (const auto& ip : sorted) ips += ip + ",";
        w.sled_vms.push_back(std::to_string(i) + ":" + vm.id.ToString() + "/" +
                             std::string(agents::ToString(vm.state)) + "/" + ips);
      }
    }
    std::sort(w.sled_vms.begin(), w.sled_vms.end());
    w.remaining = db::Utilization(*ds, pool_.id)->remaining;
    return w;
  }

  void ExpectNoSagaStuckOrUnfinished() {
    auto sagas = db::SagaListStates(*ds, 1000);
    for (const auto& s : *sagas) {
      EXPECT_NE(s.state, db::SagaState::kStuck) << s.name << " " << s.id.ToString();
      EXPECT_NE(s.state, db::SagaState::kRunning) << s.name << " " << s.id.ToString();
      EXPECT_NE(s.state, db::SagaState::kUnwinding) << s.name << " " << s.id.ToString();
    }
  }

  model::Instance Running(const std::string& name) {
    auto created = instances_->Create(Unrecorded{actor_}, ByName("p1"), Params(name, true));
    EXPECT_TRUE(created) << created.error().message();
    EXPECT_TRUE(fp::testing::WaitFor([&] {
      watcher_->WatchOnce();
      return instances_->Lookup(actor_, NameOrId(created->id), std::nullopt)->run_state ==
             model::RunState::kRunning;
    }));
    return *instances_->Lookup(actor_, NameOrId(created->id), std::nullopt);
  }

  void Faults(std::string saga, saga::FaultPlan plan) {
    plan.saga_name = std::move(saga);
    exec_->SetFaultPlanForTest(plan);
  }

  TempDatastore ds;
  model::Silo silo_;
  model::IpPool pool_;
  Actor actor_;
  std::unique_ptr<agents::daemon::SwitchAgentDaemon> switch_sim_;
  std::unique_ptr<agents::SwitchAgentClient> switch_client_;
  std::vector<std::unique_ptr<agents::daemon::SledAgentDaemon>> sled_sims_;
  std::vector<std::unique_ptr<agents::SledAgentClient>> sled_clients_;
  std::vector<Uuid> sled_ids_;
  loops::SledAgents sled_agents_;
  std::unique_ptr<loops::NatReconciler> nat_;
  std::unique_ptr<SagaDeps> deps_;
  saga::ActionRegistry registry_;
  std::unique_ptr<db::DatastoreSagaStore> saga_store_;
  std::unique_ptr<saga::SagaExecutor> exec_;
  std::unique_ptr<Projects> projects_;
  std::unique_ptr<FloatingIps> floating_ips_;
  std::unique_ptr<loops::SledWatcher> watcher_;
  std::unique_ptr<Instances> instances_;
};

class AttachSagaTest : public InstanceSagaTest {
 protected:
  model::ExternalIp Fip(const std::string& name) {
    model::FloatingIpCreate c;
    c.id = Uuid::Random();
    c.silo_id = silo_.id;
    c.project_id = db::ProjectLookup(*ds, silo_.id, ByName("p1"))->id;
    c.name = name;
    c.description = "";
    return *db::FloatingIpCreate(*ds, c);
  }

  // Attaches (kind "floating" or "ephemeral") and returns the attached address.
  Result<model::ExternalIp> Attach(const std::string& kind, const model::Instance& vm,
                                   const model::ExternalIp* fip) {
    if (kind == "floating") {
      return instances_->AttachFloating(Unrecorded{actor_}, NameOrId(fip->id), std::nullopt,
                                        NameOrId(vm.id));
    }
    return instances_->AttachEphemeral(Unrecorded{actor_}, NameOrId(vm.id), std::nullopt, {});
  }

  Status Detach(const std::string& kind, const model::Instance& vm, const model::ExternalIp* fip) {
    if (kind == "floating") {
      auto r = instances_->DetachFloating(Unrecorded{actor_}, NameOrId(fip->id), std::nullopt);
      if (!r) return Fail(r.error());
      return Ok();
    }
    return instances_->DetachEphemeral(Unrecorded{actor_}, NameOrId(vm.id), std::nullopt,
                                       std::nullopt);
  }
};

}  // namespace fp::app::testing
