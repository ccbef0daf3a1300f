#include "sim/rack.h"

#include <fmt/format.h>

#include <stdexcept>

#include "db/ip_pools.h"
#include "db/leases.h"
#include "db/projects.h"
#include "db/silos.h"
#include "db/sleds.h"

namespace fp::sim {

namespace {
constexpr std::chrono::milliseconds kAgentTimeout{2000};
}  // namespace

// One run of the control-plane server: what a process holds in memory. Declared in the order
// they are built; destroyed in reverse.
struct Rack::Server {
  std::string sec;          // its saga coordinator id
  std::string incarnation;  // this run of it (its lease's holder)
  // Several servers: the last renewal's start plus the lease's length, as the coordinator
  // keeps it (app/saga_coordinator.h): past it the server starts no saga and adopts none.
  Timestamp live_until = 0;
  Timestamp renewed_at = 0;  // when its last renewal (or the take) began
  loops::SledAgents sled_agents;
  std::vector<std::unique_ptr<agents::SledAgentClient>> sled_clients;
  std::unique_ptr<loops::NatReconciler> nat;
  std::unique_ptr<app::SagaDeps> deps;
  saga::ActionRegistry registry;
  std::unique_ptr<db::DatastoreSagaStore> store;
  std::unique_ptr<saga::SagaExecutor> executor;
  std::unique_ptr<app::Projects> projects;
  std::unique_ptr<app::FloatingIps> floating_ips;
  std::unique_ptr<app::IpPools> ip_pools;
  std::unique_ptr<loops::SledWatcher> watcher;
  std::unique_ptr<app::Instances> instances;
};

Rack::Rack(uint64_t seed, const std::string& dir, RackShape shape, std::string postgres_url)
    : path_(dir + "/floatplane.db"),
      postgres_url_(std::move(postgres_url)),
      clock_(std::make_shared<testing::ManualClock>()),
      random_(std::make_shared<SeededRandom>(seed ^ 0x5eed5eed5eed5eedull)),
      network_(seed) {
  for (int i = 0; i < shape.switches; ++i) {
    agents::daemon::DaemonOptions o{.clock = clock_.get(), .random = random_.get()};
    o.listen = false;
    o.sim_url = fmt::format("sim://switch-{}", i);
    switches_.push_back(agents::daemon::SwitchAgentDaemon::Start(o).value());
    agents::daemon::SwitchAgentDaemon* agent = switches_.back().get();
    network_.Attach(o.sim_url, [agent](const http::HttpRequest& r) { return agent->Serve(r); });
    switch_urls_.push_back(o.sim_url);
  }
  for (int i = 0; i < shape.sleds; ++i) {
    agents::daemon::DaemonOptions o{.clock = clock_.get(), .random = random_.get()};
    o.listen = false;
    o.transition_thread = false;
    o.start_delay = std::chrono::milliseconds(500);
    o.stop_delay = std::chrono::milliseconds(500);
    o.sim_url = fmt::format("sim://sled-{}", i);
    sleds_.push_back(agents::daemon::SledAgentDaemon::Start(o).value());
    agents::daemon::SledAgentDaemon* agent = sleds_.back().get();
    network_.Attach(o.sim_url, [agent](const http::HttpRequest& r) { return agent->Serve(r); });
    sled_urls_.push_back(o.sim_url);
  }
  ds_ = Open().value();
  Random& random = *random_;
  model::SiloCreate silo{.id = random.NewUuid(), .name = "rack", .description = ""};
  const model::Silo s = db::SiloCreate(*ds_, silo).value();
  actor_ = app::Actor{random.NewUuid(), s.id, model::Role::kFleetAdmin};
  (void)db::ProjectCreate(*ds_, random.NewUuid(), s.id, "p1", "").value();
  model::PoolCreate pool{.id = random.NewUuid(), .name = "v4", .description = ""};
  const model::IpPool p = db::PoolCreate(*ds_, pool).value();
  const IpRange range =
      IpRange::Make(*IpAddr::Parse("198.51.100.1"), *IpAddr::Parse("198.51.100.8")).value();
  (void)db::RangeAdd(*ds_, p.id, random.NewUuid(), range).value();
  (void)db::Link(*ds_, p.id, NameOrId(s.id), true).value();
  for (int i = 0; i < shape.sleds; ++i) {
    IpAddr underlay(IpVersion::kV6, (uint128{0xfd00} << 112) | uint128(0x101 + i));
    sled_ids_.push_back(db::SledUpsert(*ds_, fmt::format("sled-{}", i),
                                       sled_urls_[static_cast<size_t>(i)], underlay)
                            .value()
                            .id);
  }
  servers_.resize(static_cast<size_t>(std::max(1, shape.servers)));
  for (size_t k = 0; k < servers_.size(); ++k) {
    if (Status started = StartServer(k); !started) {
      throw std::runtime_error("a simulated server did not start: " + started.error().message());
    }
  }
}

Result<std::unique_ptr<db::Datastore>> Rack::Open() {
  if (postgres_url_.empty()) return db::Datastore::OpenSqlite(path_, clock_, random_);
  return db::Datastore::OpenPostgres(postgres_url_, clock_, random_);
}

Rack::~Rack() {
  servers_.clear();
  ds_.reset();
}

app::Instances& Rack::instances() { return *servers_.at(current_)->instances; }
app::FloatingIps& Rack::floating_ips() { return *servers_.at(current_)->floating_ips; }
app::IpPools& Rack::ip_pools() { return *servers_.at(current_)->ip_pools; }
loops::SledWatcher& Rack::watcher() { return *servers_.at(current_)->watcher; }
agents::SledAgentClient& Rack::sled_client(size_t i) {
  return *servers_.at(current_)->sled_clients.at(i);
}
loops::NatReconciler& Rack::nat() { return *servers_.at(current_)->nat; }
saga::SagaExecutor& Rack::executor() { return *servers_.at(current_)->executor; }

Status Rack::StartServer(size_t k) {
  auto s = std::make_unique<Server>();
  // One server keeps the id it always had; several take no lease over each other's.
  s->sec = servers_.size() == 1 ? "sim-server" : fmt::format("sim-server-{}", k);
  if (servers_.size() > 1) {
    s->incarnation = random_->NewUuid().ToString();
    // Its own unfinished sagas, from before a crash, come back under a new generation; the
    // recovery that follows the start (Recover) resumes them.
    const Timestamp began = clock_->Now();
    FP_TRY(db::SecLeaseTake(*ds_, s->sec, s->incarnation,
                            std::chrono::microseconds(kSimLeaseTtl).count()));
    s->live_until = began + std::chrono::microseconds(kSimLeaseTtl).count();
    s->renewed_at = began;
  }
  for (size_t i = 0; i < sled_urls_.size(); ++i) {
    const std::string url = sled_urls_[i];
    agents::CallerFactory connect = [this, url](std::chrono::milliseconds timeout) {
      return network_.Connect("sled agent", url, timeout);
    };
    s->sled_clients.push_back(agents::MakeSledAgentClient(std::move(connect), kAgentTimeout));
    s->sled_agents.sleds[sled_ids_[i]] = s->sled_clients.back().get();
  }
  s->nat = std::make_unique<loops::NatReconciler>(*ds_);
  for (const std::string& url : switch_urls_) {
    s->nat->AddSwitch(
        agents::MakeSwitchAgentClient(network_.Connect("switch agent", url, kAgentTimeout)));
  }
  s->deps = std::make_unique<app::SagaDeps>(app::SagaDeps{*ds_, s->sled_agents, *s->nat});
  app::RegisterSagaActions(s->registry, *s->deps);
  s->store = std::make_unique<db::DatastoreSagaStore>(*ds_);
  s->executor = std::make_unique<saga::SagaExecutor>(*s->store, s->registry, s->sec, ds_->clock(),
                                                     ds_->random());
  if (servers_.size() > 1) {
    // The coordinator's start gate: no new saga while the lease is not known to be live.
    s->executor->SetStartGate([server = s.get(), clock = clock_]() -> Status {
      if (clock->Now() < server->live_until) return Ok();
      return Fail(Error::Unavailable(
          fmt::format("the saga coordinator lease of {} expired; retry the request", server->sec)));
    });
  }
  s->projects = std::make_unique<app::Projects>(*ds_);
  s->floating_ips = std::make_unique<app::FloatingIps>(*ds_);
  s->ip_pools = std::make_unique<app::IpPools>(*ds_);
  s->watcher = std::make_unique<loops::SledWatcher>(*ds_, s->sled_agents, *s->nat);
  s->instances = std::make_unique<app::Instances>(
      *ds_, *s->projects, *s->floating_ips, s->sled_agents, *s->nat, *s->executor, *s->watcher);
  servers_.at(k) = std::move(s);
  return Ok();
}

void Rack::CrashAt(CrashPoint where, int node) {
  saga::FaultPlan plan;
  switch (where) {
    case CrashPoint::kAfterNode:
      plan.exit_after_node = node;
      break;
    case CrashPoint::kInNode:
      plan.exit_in_node = node;
      break;
    case CrashPoint::kAfterUndo:
      plan.exit_after_undo_node = node;
      break;
    case CrashPoint::kInUndo:
      plan.exit_in_undo_node = node;
      break;
  }
  plan.exit = [] { throw ServerCrash{}; };
  executor().SetFaultPlanForTest(plan);
}

void Rack::CrashAtNextLogSync() {
  sync_faults_->crash = true;
  ArmLogSyncFaults();
}

void Rack::SlowLogSyncs(int count, std::chrono::milliseconds each) {
  sync_faults_->slow = count;
  sync_faults_->slow_by = each;
  ArmLogSyncFaults();
}

void Rack::ArmLogSyncFaults() {
  ds_->TEST_SetSyncPoint(
      [faults = sync_faults_, clock = clock_, slowed = slowed_syncs_](std::string_view point) {
        if (point != "group_commit:syncing") return;
        if (faults->slow > 0) {
          --faults->slow;
          clock->Advance(faults->slow_by);
          ++*slowed;
        }
        if (faults->crash) {
          faults->crash = false;
          throw ServerCrash{};
        }
      });
}

Status Rack::Restart() {
  servers_.at(0).reset();
  ds_.reset();
  // Opening again may fail (on PostgreSQL); then there is no server and the run ends.
  ds_ = FP_TRY(Open());
  // The disk stays slow; a crash armed on the old server's syncs is gone with it.
  sync_faults_->crash = false;
  if (sync_faults_->slow > 0) ArmLogSyncFaults();
  FP_CHECK_OK(StartServer(0));
  return Recover();
}

void Rack::Stop() { servers_.at(current_).reset(); }

Status Rack::Start(size_t k) {
  FP_CHECK_OK(StartServer(k));
  current_ = k;
  return Recover();
}

Status Rack::RenewLeases() {
  if (servers_.size() == 1) return Ok();
  Status all = Ok();
  for (const auto& s : servers_) {
    if (s == nullptr) continue;
    const Timestamp began = clock_->Now();
    // As the coordinator's thread: a renewal every interval, not at every step.
    if (began - s->renewed_at < std::chrono::microseconds(kSimRenewInterval).count()) continue;
    s->renewed_at = began;
    auto renewed = db::SecLeaseRenew(*ds_, s->sec, s->incarnation,
                                     std::chrono::microseconds(kSimLeaseTtl).count());
    if (renewed && *renewed) {
      s->live_until = began + std::chrono::microseconds(kSimLeaseTtl).count();
    } else if (all) {
      all = Fail(renewed ? Error::Internal(fmt::format("the lease of {} was taken over", s->sec))
                         : renewed.error());
    }
  }
  return all;
}

Result<size_t> Rack::Adopt() {
  // As the coordinator's adoption pass: nothing while this server's own lease is not live.
  if (clock_->Now() >= servers_.at(current_)->live_until) return size_t{0};
  saga::SagaExecutor& exec = executor();
  auto adopted = FP_TRY(db::SagaAdoptExpired(
      *ds_, exec.sec(), std::chrono::microseconds(kSimAdoptGrace).count(), /*limit=*/100));
  for (const saga::OwnedSaga& s : adopted) {
    (void)exec.ResumeOwned(s.id, s.generation);  // a failure leaves it for the next pass
  }
  return adopted.size();
}

Status Rack::Recover() {
  if (servers_.size() > 1 && clock_->Now() >= servers_.at(current_)->live_until) return Ok();
  saga::SagaExecutor& exec = executor();
  for (const saga::OwnedSaga& s : FP_TRY(exec.ListUnfinished())) {
    auto claimed = FP_TRY(exec.Claim(s.id, s.generation));
    if (!claimed) continue;                  // at rest meanwhile
    (void)exec.ResumeOwned(s.id, *claimed);  // a failure leaves it for the next pass
  }
  return Ok();
}

void Rack::Disarm() {
  for (const auto& s : servers_) {
    if (s != nullptr) s->executor->SetFaultPlanForTest(std::nullopt);
  }
  *sync_faults_ = LogSyncFaults{};
  if (ds_) ds_->TEST_SetSyncPoint(nullptr);
}

}  // namespace fp::sim
