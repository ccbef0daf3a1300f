#pragma once

// A rack in one process, for the scale test and the rack benchmark: the real datastore (a temp
// SQLite file, or PostgreSQL as db::testing::TempDatastore picks), simulated switch and sled
// agents reached over HTTP on loopback, the saga executor and the instances service, and the
// server's background work: the NAT reconciler's heartbeats and the sled watcher's reports.

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "agents/daemon/sled_agent.h"
#include "agents/daemon/switch_agent.h"
#include "app/floating_ips.h"
#include "app/instances.h"
#include "app/projects.h"
#include "app/sagas/sagas.h"
#include "common/mutex.h"
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

struct RackOptions {
  int sleds = 8;
  int switches = 2;
  int heartbeat_ms = 100;
  loops::SledWatchOptions watch;
  int agent_timeout_ms = 5000;
};

// Adds `n` NAT rows of no instance (addresses 100.64.0.0 + `first` onwards, outside any pool),
// a transaction per 5,000, each at the next NAT version: the table a switch carries beyond the
// instances' own entries.
inline Status AddUnownedNatRows(db::Datastore& ds, int first, int n) {
  for (int done = 0; done < n;) {
    int batch = std::min(5000, n - done);
    FP_CHECK_OK(ds.Write([&](db::Tx& tx) -> Status {
      for (int i = done; i < done + batch; ++i) {
        const int64_t version = FP_TRY(db::NatNextVersionIn(tx));
        IpAddr ip(IpVersion::kV4, (uint128{100} << 24) | (uint128{64} << 16) |
                                      uint128(static_cast<uint32_t>(first + i)));
        FP_TRY(tx.Exec(
            "INSERT INTO nat_entry (id, external_ip, first_port, last_port, sled_address, "
            "vni, mac, instance_id, version_added, time_created) VALUES (?, ?, 0, 65535, ?, "
            "10, 'a8:40:25:00:00:01', ?, ?, 1)",
            Uuid::Random(), ip, IpAddr(*IpAddr::Parse("fd00::1")), Uuid::Random(), version));
      }
      return Ok();
    }));
    done += batch;
  }
  return Ok();
}

class RackWorld {
 public:
  explicit RackWorld(RackOptions options) : options_(options) {
    model::SiloCreate sc{.id = Uuid::Random(), .name = "rack", .description = ""};
    silo_ = db::SiloCreate(*ds, sc).value();
    actor_ = Actor{Uuid::Random(), silo_.id, model::Role::kFleetAdmin};
    model::PoolCreate pc{.id = Uuid::Random(), .name = "rack-v4", .description = ""};
    pool_ = db::PoolCreate(*ds, pc).value();
    IpRange range{*IpAddr::Parse("10.0.0.0"), *IpAddr::Parse("10.0.255.255")};
    (void)db::RangeAdd(*ds, pool_.id, Uuid::Random(), range).value();
    (void)db::Link(*ds, pool_.id, NameOrId(silo_.id), true).value();

    nat_ = std::make_unique<loops::NatReconciler>(*ds);
    for (int i = 0; i < options.switches; ++i) {
      switch_sims.push_back(agents::daemon::SwitchAgentDaemon::Start({}).value());
      nat_->AddSwitch(
          agents::MakeSwitchAgentClient(switch_sims.back()->base_url(), options.agent_timeout_ms));
    }
    for (int i = 0; i < options.sleds; ++i) {
      sled_sims.push_back(agents::daemon::SledAgentDaemon::Start({}).value());
      IpAddr underlay(IpVersion::kV6, (uint128{0xfd00} << 112) | uint128(0x101 + i));
      model::Sled sled =
          db::SledUpsert(*ds, fmt::format("sled-{}", i), sled_sims.back()->base_url(), underlay)
              .value();
      sled_ids.push_back(sled.id);
      sled_clients_.push_back(
          agents::MakeSledAgentClient(sled_sims.back()->base_url(), options.agent_timeout_ms));
      sled_agents_.sleds[sled.id] = sled_clients_.back().get();
    }
    deps_ = std::make_unique<SagaDeps>(SagaDeps{*ds, sled_agents_, *nat_});
    RegisterSagaActions(registry_, *deps_);
    saga_store_ = std::make_unique<db::DatastoreSagaStore>(*ds);
    executor_ = std::make_unique<saga::SagaExecutor>(*saga_store_, registry_, "rack-sec",
                                                     ds->clock(), ds->random());
    projects_ = std::make_unique<Projects>(*ds);
    floating_ips_ = std::make_unique<FloatingIps>(*ds);
    watcher = std::make_unique<loops::SledWatcher>(*ds, sled_agents_, *nat_);
    instances_ = std::make_unique<Instances>(*ds, *projects_, *floating_ips_, sled_agents_, *nat_,
                                             *executor_, *watcher);
  }

  ~RackWorld() { StopBackground(); }

  void StartBackground() {
    nat_->StartBackground(options_.heartbeat_ms);
    watcher->Start(options_.watch);
  }
  void StopBackground() {
    watcher->Stop();
    nat_->StopBackground();
  }

  // Creates `n` instances that start at once, on `threads` threads; `after_each(k)` runs after
  // the k-th (1-based) create returns, on the thread that made it. Returns how many were
  // created; the first error otherwise.
  Result<int> CreateInstances(int n, int threads,
                              const std::function<void(int)>& after_each = nullptr) {
    // A project's VPC subnet holds a few hundred private addresses: 200 instances per project.
    for (int p = projects_made_; p <= (created_ + n) / kPerProject; ++p, ++projects_made_) {
      FP_CHECK_OK(db::ProjectCreate(*ds, Uuid::Random(), silo_.id, fmt::format("p{}", p), ""));
    }
    std::atomic<int> next{0}, done{0};
    Mutex mu;
    std::optional<Error> failed;  // written under mu by the workers; read once they joined
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&] {
        for (int i = next++; i < n; i = next++) {
          InstanceCreateParams p;
          p.name = fmt::format("vm-{}-{}", created_, i);
          p.hostname = p.name;
          p.memory = 1 << 30;
          p.nic = model::NicKind::kIpv4;
          p.start = true;
          auto made = instances_->Create(
              Unrecorded{actor_},
              db::testing::ByName(fmt::format("p{}", (created_ + i) / kPerProject)), p);
          if (!made) {
            MutexLock lock(mu);
            if (!failed) failed = made.error();
            return;
          }
          int k = ++done;
          if (created_ + k == kAnalyzeAt) {
            if (Status analyzed = AnalyzeOnPostgres(); !analyzed) {
              MutexLock lock(mu);
              if (!failed) failed = analyzed.error();
              return;
            }
          }
          if (after_each) after_each(k);
        }
      });
    }
    for (auto& w : workers) w.join();
    created_ += n;
    if (failed) return Fail(*failed);
    return done.load();
  }

  // On PostgreSQL, the statistics autovacuum keeps (ANALYZE), which a long-lived database
  // has within a minute of its tables filling: the rack is built in less. Without them the
  // planner takes `time_deleted IS NULL` to hold for 0.5% of rows, so a partial index with
  // that condition looks nearly empty, and a connection's cached plan for a lookup by id
  // scanned all of one (821 blocks a lookup at 2,000 instances, against 12.5 after ANALYZE;
  // the scale test's PostgreSQL CPU 46 s against 22). ANALYZE also drops the cached plans.
  Status AnalyzeOnPostgres() {
    if (!db::testing::OnPostgres()) return Ok();
    return ds->Write([](db::Tx& tx) -> Status {
      FP_TRY(tx.Exec("ANALYZE"));
      return Ok();
    });
  }

  // Adds `n` NAT rows of no instance (AddUnownedNatRows), after those added before.
  Status AddNatRows(int n) {
    FP_CHECK_OK(AddUnownedNatRows(*ds, extra_nat_, n));
    extra_nat_ += n;
    return Ok();
  }

  // Where the datastore, the switches and the sleds disagree, or nullopt: every switch holds
  // the live NAT rows at the datastore's version, and every sled runs exactly the instances the
  // datastore has running there (and holds no other VM).
  std::optional<std::string> Disagreement() {
    auto snapshot = db::NatReadSnapshot(*ds);
    if (!snapshot) return "cannot read NAT: " + snapshot.error().message();
    std::vector<agents::NatEntry> desired;
    for (const auto& row : snapshot->rows) desired.push_back(loops::ToEntry(row));
    auto less = [](const agents::NatEntry& a, const agents::NatEntry& b) {
      return std::tie(a.external_ip, a.first_port) < std::tie(b.external_ip, b.first_port);
    };
    std::sort(desired.begin(), desired.end(), less);
    for (size_t k = 0; k < switch_sims.size(); ++k) {
      agents::NatTable held = switch_sims[k]->Nat();
      std::sort(held.entries.begin(), held.entries.end(), less);
      if (held.generation != snapshot->version || held.entries != desired) {
        return fmt::format(
            "switch {} at generation {} with {} entries; the datastore at {} "
            "with {}",
            k, held.generation, held.entries.size(), snapshot->version, desired.size());
      }
    }
    for (size_t k = 0; k < sled_sims.size(); ++k) {
      auto instances = db::InstancesOnSled(*ds, sled_ids[k]);
      if (!instances) return "cannot read instances: " + instances.error().message();
      std::set<Uuid> running;
      for (const auto& i : *instances) {
        if (i.state == model::InstanceState::kVmm && i.run_state == model::RunState::kRunning)
          running.insert(i.id);
        if (i.state == model::InstanceState::kVmm && i.run_state != model::RunState::kRunning) {
          return fmt::format("instance {} on sled {} is {}", i.id.ToString(), k,
                             model::ToString(i.run_state));
        }
      }
      std::set<Uuid> vms;
      for (const auto& vm : sled_sims[k]->Instances()) {
        if (vm.state != agents::VmState::kRunning) {
          return fmt::format("sled {} holds VM {} {}", k, vm.id.ToString(),
                             agents::ToString(vm.state));
        }
        vms.insert(vm.id);
      }
      if (vms != running) {
        return fmt::format("sled {} runs {} VMs; the datastore has {} running there", k, vms.size(),
                           running.size());
      }
    }
    return std::nullopt;
  }

  loops::NatReconciler& nat() { return *nat_; }
  Instances& instances() { return *instances_; }
  const Actor& actor() const { return actor_; }

  db::testing::TempDatastore ds;
  std::vector<std::unique_ptr<agents::daemon::SwitchAgentDaemon>> switch_sims;
  std::vector<std::unique_ptr<agents::daemon::SledAgentDaemon>> sled_sims;
  std::vector<Uuid> sled_ids;
  std::unique_ptr<loops::SledWatcher> watcher;

 private:
  RackOptions options_;
  model::Silo silo_;
  model::IpPool pool_;
  Actor actor_;
  std::vector<std::unique_ptr<agents::SledAgentClient>> sled_clients_;
  loops::SledAgents sled_agents_;
  std::unique_ptr<loops::NatReconciler> nat_;
  std::unique_ptr<SagaDeps> deps_;
  saga::ActionRegistry registry_;
  std::unique_ptr<db::DatastoreSagaStore> saga_store_;
  std::unique_ptr<saga::SagaExecutor> executor_;
  std::unique_ptr<Projects> projects_;
  std::unique_ptr<FloatingIps> floating_ips_;
  std::unique_ptr<Instances> instances_;
  static constexpr int kPerProject = 200;
  // The instance whose create is followed by AnalyzeOnPostgres: by then every table the
  // creates read and write has rows.
  static constexpr int kAnalyzeAt = 100;
  int created_ = 0;
  int projects_made_ = 0;
  int extra_nat_ = 0;
};

}  // namespace fp::app::testing
