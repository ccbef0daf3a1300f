// floatplane: the control plane for external IP addresses. `floatplane server --dev` runs the
// API server on an embedded SQLite database; `floatplane switch-agent --sim` and
// `floatplane sled-agent --sim` run simulated dataplane agents.

#include <fcntl.h>
#include <fmt/format.h>
#include <malloc.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "agents/sim/sled_agent_sim.h"
#include "agents/sim/switch_agent_sim.h"
#include "api/routes.h"
#include "app/floating_ips.h"
#include "app/history_pruner.h"
#include "app/idempotency.h"
#include "app/instances.h"
#include "app/ip_pools.h"
#include "app/projects.h"
#include "app/sagas.h"
#include "app/sagas/sagas.h"
#include "app/silos.h"
#include "app/sled_watcher.h"
#include "app/sleds.h"
#include "app/store_stats.h"
#include "app/tokens.h"
#include "common/log.h"
#include "db/datastore.h"
#include "db/sagas.h"
#include "db/sleds.h"
#include "http/host_port.h"
#include "http/server.h"
#include "nat/nat_reconciler.h"
#include "saga/recovery.h"
#include "saga/saga.h"

namespace {

using fp::Error;
using fp::Result;
using fp::Status;

// Every read transaction that follows a write drops its SQLite connection's page cache, so each
// request frees and reallocates a few hundred KiB. glibc's defaults hand such memory back to the
// kernel at once (madvise, a TLB shootdown across cores) and fault it in again: about a tenth of
// the server's CPU under load. Keep up to 64 MiB of free memory per arena instead, and serve
// allocations below 16 MiB from the heap. GLIBC_TUNABLES that set malloc options win.
void TuneAllocator() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables && std::string_view(tunables).find("glibc.malloc.") != std::string_view::npos) {
    return;
  }
  mallopt(M_MMAP_THRESHOLD, 16 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
}

// Each client connection (up to --max-connections), agent connection and read connection of
// the datastore holds a descriptor; the usual soft limit of 1024 is below
// what a loaded server needs. Raise it to the hard limit, as servers commonly do.
void RaiseDescriptorLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &limit);
  }
}

// Accepts HOST:PORT, with IPv6 hosts in brackets ([::1]:8080).
Result<fp::http::HostPort> ParseListen(const std::string& text) {
  auto address = fp::http::ParseHostPort(text);
  if (!address) {
    return fp::Fail(
        Error::InvalidRequest(fmt::format("--listen \"{}\": {}", text, address.error().message())));
  }
  return address;
}

// Writes `content` to `path` atomically (temporary file, fsync, rename), readable by the owner
// only.
Status WriteSecretFile(const std::filesystem::path& path, const std::string& content) {
  std::string tmp = path.string() + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return fp::Fail(Error::Internal(fmt::format("cannot write {}", tmp)));
  bool ok = ::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size()) &&
            ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    return fp::Fail(Error::Internal(fmt::format("cannot write {}", path.string())));
  }
  return fp::Ok();
}

// Blocks SIGINT and SIGTERM in the calling thread and in every thread it starts afterwards, so
// that only WaitForStopSignal sees them; ignores SIGPIPE. Call before any thread starts.
sigset_t BlockStopSignals() {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return stop_signals;
}

// Waits until SIGINT or SIGTERM arrives, and logs it.
void WaitForStopSignal(const sigset_t& stop_signals) {
  int sig = 0;
  sigwait(&stop_signals, &sig);
  fp::LogEvent("info", "stopping", {{"signal", sig == SIGINT ? "SIGINT" : "SIGTERM"}});
}

struct ServerFlags {
  bool dev = false;
  std::string data_dir = ".floatplane-dev";
  std::string listen = "127.0.0.1:12220";
  std::string switch_agent;              // URL; empty: an in-process simulated switch agent
  std::vector<std::string> sled_agents;  // URLs; empty: two in-process simulated sled agents
  // Short enough that an operation whose agent hangs (one call, then its undo's) still
  // answers within 10 s.
  int agent_timeout_ms = 2000;
  bool enable_test_faults = false;
  // Finished sagas and idempotency keys older than this are deleted (seconds; see
  // app/history_pruner.h), checked every history_prune_interval_s.
  int64_t history_retention_s = 3 * 24 * 3600;
  int64_t history_prune_interval_s = 60;
  // Connection admission (see fp::http::HttpServerOptions).
  int max_connections = fp::http::HttpServerOptions{}.max_connections;
  int max_connections_per_client = fp::http::HttpServerOptions{}.max_connections_per_client;
  int request_timeout_ms = 10'000;
  int idle_timeout_ms = 60'000;
};

// The agents the server drives: external ones named by URL, or simulated ones in this process
// (reached over HTTP on loopback all the same).
struct DataplaneProcesses {
  std::unique_ptr<fp::agents::sim::SwitchAgentSim> switch_sim;
  std::vector<std::unique_ptr<fp::agents::sim::SledAgentSim>> sled_sims;
  std::unique_ptr<fp::agents::SwitchAgentClient> switch_client;
  std::vector<std::unique_ptr<fp::agents::SledAgentClient>> sled_clients;
  fp::app::Dataplane dataplane;
};

Status StartDataplane(const ServerFlags& flags, fp::db::Datastore& ds, DataplaneProcesses& out) {
  std::string switch_url = flags.switch_agent;
  if (switch_url.empty()) {
    out.switch_sim = FP_TRY(fp::agents::sim::SwitchAgentSim::Start({}));
    switch_url = out.switch_sim->base_url();
  }
  out.switch_client = fp::agents::MakeSwitchAgentClient(switch_url, flags.agent_timeout_ms);
  out.dataplane.switch_agent = out.switch_client.get();
  std::vector<std::pair<std::string, std::string>> sleds;  // (serial, url)
  if (flags.sled_agents.empty()) {
    for (int i = 0; i < 2; ++i) {
      fp::agents::sim::SimOptions options;
      options.start_delay = std::chrono::milliseconds(100);
      options.stop_delay = std::chrono::milliseconds(100);
      out.sled_sims.push_back(FP_TRY(fp::agents::sim::SledAgentSim::Start(options)));
      sleds.emplace_back(fmt::format("dev-sled-{}", i), out.sled_sims.back()->base_url());
    }
  } else {
    for (const std::string& url : flags.sled_agents) sleds.emplace_back(url, url);
  }
  for (size_t i = 0; i < sleds.size(); ++i) {
    // Underlay addresses fd00:1122:3344:101::1, :102::1, ... in sled order.
    fp::IpAddr underlay(fp::IpVersion::kV6, (fp::uint128{0xfd0011223344u} << 80) |
                                                (fp::uint128{0x101u + i} << 64) | 1u);
    fp::model::Sled sled =
        FP_TRY(fp::db::SledUpsert(ds, sleds[i].first, sleds[i].second, underlay));
    out.sled_clients.push_back(
        fp::agents::MakeSledAgentClient(sleds[i].second, flags.agent_timeout_ms));
    out.dataplane.sleds[sled.id] = out.sled_clients.back().get();
  }
  fp::LogEvent("info", "dataplane",
               {{"switch_agent", switch_url},
                {"sled_agents", sleds.size()},
                {"in_process", flags.sled_agents.empty()}});
  return fp::Ok();
}

// Test-only saga faults, from FLOATPLANE_TEST_SAGA_FAULTS (JSON), honoured only with
// --enable-test-faults: {"saga": NAME, "fail_node": N, "fail_node_after_effect": N,
// "repeat_every_action": true, "repeat_undo_node": N, "fail_undo_node": N,
// "exit_after_node": N, "exit_in_node": N, "exit_after_undo_node": N, "exit_in_undo_node": N}
// (saga.h's FaultPlan). Also FLOATPLANE_TEST_SYNC_DELAY_MS (see RunServer).
std::optional<fp::saga::FaultPlan> TestFaultsFromEnvironment() {
  const char* text = std::getenv("FLOATPLANE_TEST_SAGA_FAULTS");
  if (!text) return std::nullopt;
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  fp::saga::FaultPlan plan;
  if (j.contains("saga")) plan.saga_name = j["saga"].get<std::string>();
  if (j.contains("fail_node")) plan.fail_node = j["fail_node"].get<int>();
  if (j.contains("fail_node_after_effect")) {
    plan.fail_node_after_effect = j["fail_node_after_effect"].get<int>();
  }
  if (j.contains("repeat_undo_node")) plan.repeat_undo_node = j["repeat_undo_node"].get<int>();
  if (j.contains("fail_undo_node")) plan.fail_undo_node = j["fail_undo_node"].get<int>();
  if (j.contains("exit_after_node")) plan.exit_after_node = j["exit_after_node"].get<int>();
  if (j.contains("exit_in_node")) plan.exit_in_node = j["exit_in_node"].get<int>();
  if (j.contains("exit_after_undo_node")) {
    plan.exit_after_undo_node = j["exit_after_undo_node"].get<int>();
  }
  if (j.contains("exit_in_undo_node")) plan.exit_in_undo_node = j["exit_in_undo_node"].get<int>();
  plan.repeat_every_action = j.value("repeat_every_action", false);
  return plan;
}

// Unfinished sagas resumed at once after a restart.
constexpr int kRecoveryConcurrency = 8;

// Logs where a recovered saga came to rest; a saga that cannot resume, at level error.
void LogRecovery(const fp::saga::RecoveryEvent& e) {
  using Kind = fp::saga::RecoveryEvent::Kind;
  nlohmann::json fields{{"saga_id", e.saga_id.ToString()}};
  if (e.error) fields["error"] = e.error->message();
  switch (e.kind) {
    case Kind::kAtRest: {
      auto kind = e.outcome.kind;
      fields["outcome"] = kind == fp::saga::SagaResultKind::kDone      ? "done"
                          : kind == fp::saga::SagaResultKind::kUnwound ? "unwound"
                                                                       : "stuck";
      if (e.outcome.error) fields["error"] = e.outcome.error->message();
      bool stuck = kind == fp::saga::SagaResultKind::kStuck;
      fp::LogEvent(stuck ? "error" : "info", "saga recovered", fields);
      return;
    }
    case Kind::kCannotResume:
      fields["outcome"] = "stuck";
      fp::LogEvent("error", "saga cannot resume; marked stuck for an operator", fields);
      return;
    case Kind::kRetrying:
      fp::LogEvent("warn", "saga recovery failed; trying again later", fields);
      return;
  }
}

int RunServer(const ServerFlags& flags) {
  const bool dev = flags.dev;
  const std::string& data_dir = flags.data_dir;
  const std::string& listen = flags.listen;
  if (!dev) {
    std::cerr << "floatplane server: only the embedded dev mode exists so far; run "
                 "`floatplane server --dev` (see README.md)\n";
    return 2;
  }
  auto address = ParseListen(listen);
  if (!address) {
    std::cerr << "floatplane server: " << address.error().message() << "\n";
    return 2;
  }
  std::error_code ec;
  std::filesystem::create_directories(data_dir, ec);
  if (ec) {
    std::cerr << "floatplane server: cannot create data directory " << data_dir << ": "
              << ec.message() << "\n";
    return 1;
  }
  // Before the datastore starts its checkpointer thread: a thread started earlier would not
  // block SIGTERM, and the kernel would deliver it there and kill the process uncleanly. A
  // signal during startup stays pending and stops the server as soon as it is up.
  sigset_t stop_signals = BlockStopSignals();
  std::filesystem::path dir(data_dir);
  auto datastore = fp::db::Datastore::OpenSqlite((dir / "floatplane.db").string(),
                                                 std::make_shared<fp::SystemClock>());
  if (!datastore) {
    std::cerr << "floatplane server: " << datastore.error().message() << "\n";
    return 1;
  }
  // The application services (the API's and the instances service's).
  fp::app::TokenCache token_cache(**datastore, (*datastore)->clock());
  fp::app::Tokens tokens(**datastore, token_cache);
  fp::app::Silos silos(**datastore, token_cache);
  fp::app::Projects projects(**datastore);
  fp::app::IpPools ip_pools(**datastore);
  fp::app::FloatingIps floating_ips(**datastore);

  auto minted = tokens.BootstrapDev();
  if (!minted) {
    std::cerr << "floatplane server: bootstrap failed: " << minted.error().message() << "\n";
    return 1;
  }
  std::filesystem::path token_file = dir / "admin-token";
  std::optional<std::string> secret = *minted;
  if (!secret && !std::filesystem::exists(token_file)) {
    // The database survived but the token file did not: mint a replacement rather than lock
    // the operator out.
    auto replacement = tokens.MintFleetAdminToken("dev-admin-replacement");
    if (!replacement) {
      std::cerr << "floatplane server: " << replacement.error().message() << "\n";
      return 1;
    }
    fp::LogEvent("warn", "admin-token file was missing; minted a new fleet admin token",
                 {{"path", token_file.string()}});
    secret = *replacement;
  }
  if (secret) {
    if (auto w = WriteSecretFile(token_file, *secret + "\n"); !w) {
      std::cerr << "floatplane server: " << w.error().message() << "\n";
      return 1;
    }
  }

  DataplaneProcesses processes;
  if (auto s = StartDataplane(flags, **datastore, processes); !s) {
    std::cerr << "floatplane server: cannot start the dataplane: " << s.error().message() << "\n";
    return 1;
  }
  fp::nat::NatReconciler nat(**datastore, *processes.dataplane.switch_agent);
  fp::app::SagaDeps deps{**datastore, processes.dataplane, nat};
  fp::saga::ActionRegistry registry;
  fp::app::RegisterSagaActions(registry, deps);
  // One server per SQLite database: it is the only saga execution coordinator.
  fp::db::DatastoreSagaStore saga_store(**datastore);
  fp::saga::SagaExecutor executor(saga_store, registry, "sqlite-server");
  if (flags.enable_test_faults) {
    executor.SetFaultPlanForTest(TestFaultsFromEnvironment());
    // A slow disk: each sync of the log first waits this long, so commits stay written but
    // unanswered for a while (a test kills the server in that window).
    if (const char* delay = std::getenv("FLOATPLANE_TEST_SYNC_DELAY_MS")) {
      auto ms = std::chrono::milliseconds(std::atoi(delay));
      (*datastore)->TEST_SetSyncPoint([ms](std::string_view point) {
        if (point == "group_commit:syncing") std::this_thread::sleep_for(ms);
      });
    }
    fp::LogEvent("warn", "test faults enabled: this server is for tests only");
  }
  fp::app::SledWatcher watcher(**datastore, processes.dataplane, nat);
  fp::app::Instances instances(**datastore, projects, floating_ips, processes.dataplane, nat,
                               executor, watcher);
  fp::app::Sleds sleds(**datastore);

  // What a previous run left unfinished resumes in the background while the server serves:
  // the resources those sagas hold are in transitional states, which requests meet as a
  // retryable 503. The listing happens now, before any request can start a saga.
  fp::saga::RecoveryOptions recovery_options;
  recovery_options.concurrency = kRecoveryConcurrency;
  recovery_options.report = LogRecovery;
  auto recovery = fp::saga::SagaRecovery::Start(executor, std::move(recovery_options));
  if (!recovery) {
    std::cerr << "floatplane server: cannot list unfinished sagas: " << recovery.error().message()
              << "\n";
    return 1;
  }
  if (!(*recovery)->sagas().empty()) {
    fp::LogEvent("info", "resuming unfinished sagas in the background",
                 {{"sagas", (*recovery)->sagas().size()}, {"concurrency", kRecoveryConcurrency}});
  }
  // The NAT reconciler's first pass runs at once, off the start path.
  watcher.Start(100);
  nat.StartBackground(2000);
  fp::app::HistoryPruner pruner(
      **datastore,
      fp::app::HistoryRetention{.retention = std::chrono::seconds(flags.history_retention_s),
                                .period = std::chrono::seconds(flags.history_prune_interval_s)});
  pruner.Start();

  fp::http::HttpServerOptions options;
  options.host = address->host;
  options.port = address->port;
  options.max_connections = flags.max_connections;
  options.max_connections_per_client = flags.max_connections_per_client;
  options.request_timeout = std::chrono::milliseconds(flags.request_timeout_ms);
  options.idle_timeout = std::chrono::milliseconds(flags.idle_timeout_ms);
  // Set once the server runs; read by /metrics, which only a running server can serve.
  std::atomic<fp::http::HttpServer*> serving{nullptr};
  fp::app::Idempotency idempotency(**datastore);
  fp::app::Sagas sagas(**datastore);
  fp::app::StoreStats store_stats(**datastore);
  fp::api::Services services{silos,      projects, ip_pools,    floating_ips, tokens,
                             &instances, &sleds,   idempotency, sagas,        store_stats};
  auto server = fp::http::HttpServer::Start(options, fp::api::MakeApiHandler(services, [&serving] {
                                              fp::http::HttpServer* s = serving.load();
                                              return s ? s->stats() : fp::http::HttpServerStats{};
                                            }));
  if (!server) {
    std::cerr << "floatplane server: " << server.error().message() << "\n";
    executor.Quiesce();
    return 1;
  }
  serving = server->get();
  std::string host = fp::http::UrlHost(address->host);
  std::cout << "listening on http://" << host << ":" << (*server)->port() << std::endl;
  fp::LogEvent("info", "serving",
               {{"address", fmt::format("{}:{}", host, (*server)->port())},
                {"data_dir", data_dir},
                {"admin_token_file", token_file.string()}});

  WaitForStopSignal(stop_signals);
  (*server)->Stop();
  // No request runs a saga any more. Sagas still recovering stop before their next node (an
  // agent call in progress ends within --agent-timeout-ms) and resume at the next start.
  executor.Quiesce();
  (*recovery)->Stop();
  watcher.Stop();
  nat.StopBackground();
  pruner.Stop();
  fp::LogEvent("info", "stopped");
  return 0;
}

// `floatplane switch-agent` / `floatplane sled-agent`: serves a simulated agent (Agent is
// SwitchAgentSim or SledAgentSim) until SIGINT or SIGTERM.
template <typename Agent>
int RunAgent(const std::string& command, bool sim, const std::string& listen,
             fp::agents::sim::SimOptions options) {
  if (!sim) {
    std::cerr << "floatplane " << command << ": only the simulated agent exists so far; run "
              << "`floatplane " << command << " --sim`\n";
    return 2;
  }
  auto address = ParseListen(listen);
  if (!address) {
    std::cerr << "floatplane " << command << ": " << address.error().message() << "\n";
    return 2;
  }
  options.host = address->host;
  options.port = address->port;

  sigset_t stop_signals = BlockStopSignals();
  auto agent = Agent::Start(options);
  if (!agent) {
    std::cerr << "floatplane " << command << ": " << agent.error().message() << "\n";
    return 1;
  }
  std::cout << "listening on " << (*agent)->base_url() << std::endl;
  fp::LogEvent(
      "info", "serving",
      {{"agent", command},
       {"address", fmt::format("{}:{}", fp::http::UrlHost(address->host), (*agent)->port())}});

  WaitForStopSignal(stop_signals);
  (*agent)->Stop();
  fp::LogEvent("info", "stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  TuneAllocator();
  RaiseDescriptorLimit();
  CLI::App app{"floatplane: the control plane for cloud VMs' public IP addresses"};
  app.require_subcommand(1);

  ServerFlags flags;
  CLI::App* server = app.add_subcommand("server", "Run the API server");
  server->add_flag("--dev", flags.dev,
                   "Embedded mode: SQLite database in --data-dir; creates silo `default` and a "
                   "fleet admin token (DATA_DIR/admin-token) on first start");
  // The last occurrence wins, so wrappers (scripts/dev) can pass defaults that users override.
  server->add_option("--data-dir", flags.data_dir, "Directory for the database and admin-token")
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  server->add_option("--listen", flags.listen, "HOST:PORT to serve on (port 0 picks a free port)")
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  server->add_option("--switch-agent", flags.switch_agent,
                     "URL of the switch agent (default: a simulated one in this process)");
  server->add_option("--sled-agent", flags.sled_agents,
                     "URL of a sled agent; repeat for each sled (default: two simulated ones in "
                     "this process)");
  server
      ->add_option("--agent-timeout-ms", flags.agent_timeout_ms,
                   "Deadline of every call to an agent")
      ->check(CLI::Range(50, 60000))
      ->capture_default_str();
  // A duration: a number with a unit s, m, h or d (seconds without one).
  const std::map<std::string, int64_t> duration_units = {
      {"s", 1}, {"m", 60}, {"h", 3600}, {"d", 24 * 3600}};
  server
      ->add_option("--history-retention", flags.history_retention_s,
                   "How long finished sagas (done, unwound) and Idempotency-Key records are "
                   "kept before a background task deletes them: a number with a unit s, m, h or d "
                   "(e.g. 12h), from 1s to 3650d; stuck sagas are kept until repaired")
      ->transform(CLI::AsNumberWithUnit(duration_units, CLI::AsNumberWithUnit::CASE_SENSITIVE)
                      .description(""))
      ->check(CLI::Range(int64_t{1}, int64_t{10} * 365 * 24 * 3600).description(""))
      ->default_str("3d")
      ->type_name("DURATION");
  server
      ->add_option("--history-prune-interval", flags.history_prune_interval_s,
                   "How often that task runs (same units, from 1s to 1d)")
      ->transform(CLI::AsNumberWithUnit(duration_units, CLI::AsNumberWithUnit::CASE_SENSITIVE)
                      .description(""))
      ->check(CLI::Range(int64_t{1}, int64_t{24} * 3600).description(""))
      ->default_str("1m")
      ->type_name("DURATION");
  server
      ->add_option("--max-connections", flags.max_connections,
                   "Open client connections, idle ones included; beyond it a connection gets "
                   "503 with Retry-After (lowered to fit the descriptor limit)")
      ->check(CLI::Range(1, 1'000'000))
      ->capture_default_str();
  server
      ->add_option("--max-connections-per-client", flags.max_connections_per_client,
                   "Open connections from one client address (IPv6: one /64); beyond it, 503")
      ->check(CLI::Range(1, 1'000'000))
      ->capture_default_str();
  server
      ->add_option("--request-timeout-ms", flags.request_timeout_ms,
                   "A request (head and body) must arrive within this from its first byte, and "
                   "a new connection's first request within this from connecting; else 408 and "
                   "the connection is closed")
      ->check(CLI::Range(100, 3'600'000))
      ->capture_default_str();
  server
      ->add_option("--idle-timeout-ms", flags.idle_timeout_ms,
                   "A keep-alive connection with no request for this long is closed")
      ->check(CLI::Range(100, 3'600'000))
      ->capture_default_str();
  server->add_flag("--enable-test-faults", flags.enable_test_faults,
                   "Tests only: apply saga faults from FLOATPLANE_TEST_SAGA_FAULTS and a "
                   "slow log sync from FLOATPLANE_TEST_SYNC_DELAY_MS");

  bool switch_sim = false;
  std::string switch_listen = "127.0.0.1:0";
  CLI::App* switch_agent =
      app.add_subcommand("switch-agent", "Run a switch agent (the rack switch's NAT table)");
  switch_agent->add_flag("--sim", switch_sim, "Simulated: the NAT table in memory");
  switch_agent
      ->add_option("--listen", switch_listen,
                   "HOST:PORT to serve on (port 0 picks a free port; the address is printed)")
      ->capture_default_str();

  bool sled_sim = false;
  std::string sled_listen = "127.0.0.1:0";
  int64_t start_delay_ms = 200;
  int64_t stop_delay_ms = 200;
  CLI::App* sled_agent =
      app.add_subcommand("sled-agent", "Run a sled agent (instances and their external IPs)");
  sled_agent->add_flag("--sim", sled_sim, "Simulated: instances and their ports in memory");
  sled_agent
      ->add_option("--listen", sled_listen,
                   "HOST:PORT to serve on (port 0 picks a free port; the address is printed)")
      ->capture_default_str();
  sled_agent
      ->add_option("--start-delay-ms", start_delay_ms,
                   "How long an instance stays starting before it runs")
      ->check(CLI::Range(int64_t{0}, int64_t{3'600'000}))
      ->capture_default_str();
  sled_agent
      ->add_option("--stop-delay-ms", stop_delay_ms,
                   "How long an instance stays stopping before it is stopped")
      ->check(CLI::Range(int64_t{0}, int64_t{3'600'000}))
      ->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  if (server->parsed()) return RunServer(flags);
  if (switch_agent->parsed()) {
    return RunAgent<fp::agents::sim::SwitchAgentSim>("switch-agent", switch_sim, switch_listen, {});
  }
  if (sled_agent->parsed()) {
    fp::agents::sim::SimOptions options;
    options.start_delay = std::chrono::milliseconds(start_delay_ms);
    options.stop_delay = std::chrono::milliseconds(stop_delay_ms);
    return RunAgent<fp::agents::sim::SledAgentSim>("sled-agent", sled_sim, sled_listen, options);
  }
  return 2;
}
