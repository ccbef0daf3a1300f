#include "cmd/server.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <thread>

#include "agents/daemon/sled_agent.h"
#include "agents/daemon/switch_agent.h"
#include "api/console.h"
#include "api/routes.h"
#include "app/audit.h"
#include "app/floating_ips.h"
#include "app/idempotency.h"
#include "app/instances.h"
#include "app/ip_pools.h"
#include "app/projects.h"
#include "app/saga_coordinator.h"
#include "app/saga_list.h"
#include "app/sagas/sagas.h"
#include "app/silos.h"
#include "app/sleds.h"
#include "app/store_stats.h"
#include "app/tokens.h"
#include "app/users.h"
#include "cmd/database_url.h"
#include "cmd/process.h"
#include "cmd/server_agents.h"
#include "cmd/server_metrics.h"
#include "cmd/server_startup.h"
#include "common/log.h"
#include "db/datastore.h"
#include "db/leases.h"
#include "db/open_interrupt.h"
#include "db/sagas.h"
#include "db/schema.h"
#include "db/sleds.h"
#include "http/host_port.h"
#include "http/server.h"
#include "http/static_site.h"
#include "http/tls.h"
#include "loops/history_pruner.h"
#include "loops/nat_reconciler.h"
#include "loops/sled_watcher.h"
#include "saga/saga.h"

namespace fp::cmd {

namespace {

// Unfinished sagas resumed at once after a restart.
constexpr int kRecoveryConcurrency = 8;

// SIGHUP: new connections get the certificate the files hold now; open ones keep theirs. A file
// that cannot be used changes nothing (the server goes on with the one it has).
void ReloadTlsCertificate(fp::http::TlsCertificate& tls) {
  if (Status reloaded = tls.Reload(); !reloaded) {
    fp::LogEvent("error",
                 "SIGHUP: cannot read the TLS certificate again; still serving the old one",
                 {{"error", reloaded.error().message()}});
    return;
  }
  fp::LogEvent("info", "SIGHUP: TLS certificate read again", {{"certificate", tls.Describe()}});
}

}  // namespace

int RunServer(const ServerFlags& flags) {
  ApplyLogLevel(flags.log_level);
  const std::string& data_dir = flags.data_dir;
  const std::string& listen = flags.listen;
  if (std::optional<std::string> refused = RefusedFlags(flags)) {
    std::cerr << "floatplane server: " << *refused << "\n";
    return 2;
  }
  auto address = ParseListen(listen);
  if (!address) {
    std::cerr << "floatplane server: " << address.error().message() << "\n";
    return 2;
  }
  std::shared_ptr<fp::http::TlsCertificate> tls;
  if (!flags.tls_cert.empty()) {
    auto loaded = fp::http::TlsCertificate::Load(flags.tls_cert, flags.tls_key);
    if (!loaded) {
      std::cerr << "floatplane server: --tls-cert/--tls-key: " << loaded.error().message() << "\n";
      return 2;
    }
    tls = *loaded;
  }
  auto console = LoadConsole(flags.console_dir);
  if (!console) {
    std::cerr << "floatplane server: " << (flags.console_dir.empty() ? "" : "--console-dir: ")
              << console.error().message() << "\n";
    return 2;
  }
  std::filesystem::path dir(data_dir);
  auto database = ParseDatabaseSetting(flags.database, dir);
  if (!database) {
    std::cerr << "floatplane server: --database: " << database.error().message() << "\n";
    return 2;
  }
  std::error_code ec;
  if (database->engine == DatabaseEngine::kSqlite) {
    // A SQLite file's directory is not made (but the data directory, made below): a path
    // mistyped in a config file would otherwise start an empty database. Checked before anything
    // is made, so that a refused start leaves nothing behind.
    const std::filesystem::path parent =
        std::filesystem::path(database->target).parent_path().lexically_normal();
    if (!parent.empty() && std::filesystem::weakly_canonical(parent, ec) !=
                               std::filesystem::weakly_canonical(dir, ec)) {
      const std::filesystem::file_status status = std::filesystem::status(parent, ec);
      std::string problem;
      if (ec && ec != std::errc::no_such_file_or_directory) {
        problem = "cannot be looked at: " + ec.message();
      } else if (!std::filesystem::exists(status)) {
        problem = "does not exist; create it, or give another path";
      } else if (!std::filesystem::is_directory(status)) {
        problem = "is not a directory; give another path";
      }
      if (!problem.empty()) {
        std::cerr << "floatplane server: the SQLite database (--database) " << database->target
                  << ": its directory " << parent.string() << " " << problem << "\n";
        return 1;
      }
    }
  }
  const bool sqlite = database->engine == DatabaseEngine::kSqlite;
  // The data directory's own file, which the directory's lock covers.
  const bool sqlite_of_data_dir =
      sqlite && std::filesystem::weakly_canonical(database->target, ec) ==
                    std::filesystem::weakly_canonical(dir / "floatplane.db", ec);
  // --migrate-only needs the data directory only for a SQLite file in it: a deployment's
  // schema step on another database leaves no directory behind (the default one is
  // .floatplane-dev in the working directory).
  const bool uses_data_dir =
      !flags.migrate_only ||
      (sqlite && std::filesystem::weakly_canonical(
                     std::filesystem::absolute(database->target, ec).parent_path(), ec) ==
                     std::filesystem::weakly_canonical(dir, ec));
  if (uses_data_dir) {
    std::filesystem::create_directories(data_dir, ec);
    if (ec) {
      std::cerr << "floatplane server: cannot create data directory (--data-dir) " << data_dir
                << ": " << ec.message() << "\n";
      return 1;
    }
  }
  // One server per data directory (its coordinator id and admin token are one server's), and
  // per SQLite file (several servers share a PostgreSQL database only): held until the process
  // ends, given up by the kernel even when it is killed.
  std::vector<fp::cmd::ExclusiveHold> holds;
  std::vector<std::pair<std::filesystem::path, std::string>> to_hold;
  if (uses_data_dir) {
    to_hold.emplace_back(dir / "floatplane.lock", "data directory (--data-dir) " + data_dir);
  }
  if (sqlite && !sqlite_of_data_dir) {
    to_hold.emplace_back(database->target + ".lock",
                         "SQLite database (--database) " + database->target);
  }
  for (const auto& [path, what] : to_hold) {
    auto hold = fp::cmd::ExclusiveHold::Take(path);
    if (!hold) {
      const char* flag = path.filename() == "floatplane.lock" ? "--data-dir" : "--database";
      if (hold.error().kind() != ErrorKind::kServiceUnavailable) {
        std::cerr << "floatplane server: the " << what << ": " << hold.error().message()
                  << "; fix that, or give this one another " << flag << "\n";
        return 1;
      }
      std::cerr << "floatplane server: the " << what
                << " is in use by another floatplane server: " << hold.error().message()
                << "; stop that server first, or give this one another " << flag << "\n";
      return 1;
    }
    holds.push_back(std::move(*hold));
  }
  // Read (or made) before anything is opened: a start refused over the id kept in the data
  // directory leaves the database unmigrated and no admin token minted. A migration alone
  // coordinates nothing.
  fp::Result<std::string> coordinator_id = std::string();
  if (!flags.migrate_only) coordinator_id = CoordinatorId(flags, dir);
  if (!coordinator_id) {
    std::cerr << "floatplane server: cannot keep the coordinator id: "
              << coordinator_id.error().message() << "\n";
    return 1;
  }
  // Before the datastore starts its checkpointer thread: a thread started earlier would not
  // block SIGTERM, and the kernel would deliver it there and kill the process uncleanly. A
  // signal during startup stays pending and stops the server as soon as it is up; but one
  // during the open (a schema migration may copy a table for minutes, or wait for another
  // server's) cancels the migration, which rolls back, and the process ends at once.
  sigset_t stop_signals = BlockStopSignals(/*reload=*/true);
  fp::db::OpenInterrupt open_interrupt;
  StopSignalWatch watch([&open_interrupt] { open_interrupt.Interrupt(); });
  auto datastore =
      OpenDatastore(*database, {.pool_size = flags.postgres_pool_size}, &open_interrupt);
  if (const int signal = watch.Stop(); signal != 0) {
    if (!datastore && open_interrupt.honoured()) {
      std::cerr << "floatplane server: stopped by " << (signal == SIGINT ? "SIGINT" : "SIGTERM")
                << ": " << datastore.error().message() << "; the next start migrates again\n";
      DieBySignal(signal);
    }
    // The open ended first, opened or failed on its own (reported below): the signal is
    // pending again and stops the server once it is up, as any other during startup.
    ::kill(::getpid(), signal);
  }
  if (!datastore) {
    std::cerr << "floatplane server: " << datastore.error().message() << "\n";
    return 1;
  }
  fp::LogEvent("info", "datastore open",
               {{"engine", database->engine == DatabaseEngine::kSqlite ? "sqlite" : "postgres"},
                {"database", DescribeDatabase(*database)}});
  if (flags.migrate_only) {
    std::cout << "schema at version " << fp::db::LatestSchemaVersion() << ": "
              << DescribeDatabase(*database) << std::endl;
    return 0;
  }
  // The application services (the API's and the instances service's).
  fp::app::TokenCache token_cache(**datastore, (*datastore)->clock());
  fp::app::Tokens tokens(**datastore, token_cache);
  fp::app::Silos silos(**datastore, token_cache);
  fp::app::Projects projects(**datastore);
  fp::app::IpPools ip_pools(**datastore);
  fp::app::FloatingIps floating_ips(**datastore);

  std::filesystem::path token_file = dir / "admin-token";
  if (auto s = EnsureAdminToken(tokens, flags, *database, token_file); !s) {
    std::cerr << "floatplane server: bootstrap failed: " << s.error().message() << "\n";
    return 1;
  }

  ServerAgents processes;
  if (auto s = StartAgents(flags, **datastore, processes); !s) {
    std::cerr << "floatplane server: cannot start the agents: " << s.error().message() << "\n";
    return 1;
  }
  if (!processes.sled_sims.empty()) {
    // The in-process sleds started empty: what ran on them when this server last stopped runs
    // again, as the dev server's data does.
    auto restarted = fp::loops::RestartLostVms(**datastore, processes.sled_agents);
    if (!restarted) {
      fp::LogEvent("warn", "could not restart the instances of the in-process sleds",
                   {{"error", restarted.error().message()}});
    } else if (*restarted > 0) {
      fp::LogEvent("info", "restarted the instances the in-process sleds ran before",
                   {{"instances", *restarted}});
    }
  }
  // Declared before the background tasks that use them (which stop first).
  // The task leases' holder names carry this start's own part, so that a zombie of the
  // previous process under the same coordinator id is fenced by this one (db/leases.h).
  const int64_t task_lease_us = int64_t{flags.lease_ttl_ms} * 1000;
  const std::string process = (*datastore)->random().NewUuid().ToString().substr(0, 8);
  fp::db::TaskLeaseKeeper watcher_lease(**datastore, "sled-watcher", *coordinator_id, task_lease_us,
                                        process);
  fp::db::TaskLeaseKeeper nat_lease(**datastore, "nat-repair", *coordinator_id, task_lease_us,
                                    process);
  fp::loops::NatReconciler nat(**datastore);
  for (const auto& client : processes.switch_clients) nat.AddSwitch(client);
  fp::app::SagaDeps deps{**datastore, processes.sled_agents, nat};
  fp::saga::ActionRegistry registry;
  fp::app::RegisterSagaActions(registry, deps);
  fp::db::DatastoreSagaStore saga_store(**datastore);
  fp::saga::SagaExecutor executor(saga_store, registry, *coordinator_id, (*datastore)->clock(),
                                  (*datastore)->random());
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
  fp::loops::SledWatcher watcher(**datastore, processes.sled_agents, nat);
  fp::app::Instances instances(**datastore, projects, floating_ips, processes.sled_agents, nat,
                               executor, watcher);
  fp::app::Sleds sleds(**datastore, nat, watcher);

  // What a previous run left unfinished resumes in the background while the server serves:
  // the resources those sagas hold are in transitional states, which requests meet as a
  // retryable 503. The coordinator takes them over (and adopts the sagas of servers whose lease
  // expired) now, before any request can start a saga.
  fp::app::CoordinatorOptions coordinator_options;
  coordinator_options.lease_ttl = std::chrono::milliseconds(flags.lease_ttl_ms);
  coordinator_options.renew_interval =
      std::chrono::milliseconds(std::max(20, flags.lease_ttl_ms / 5));
  coordinator_options.adopt_grace = std::chrono::milliseconds(flags.lease_grace_ms);
  coordinator_options.recovery.concurrency = kRecoveryConcurrency;
  coordinator_options.recovery.report = LogRecovery;
  auto coordinator =
      fp::app::SagaCoordinator::Start(**datastore, executor, std::move(coordinator_options));
  if (!coordinator) {
    std::cerr << "floatplane server: cannot take the saga coordinator lease: "
              << coordinator.error().message() << "\n";
    return 1;
  }
  if ((*coordinator)->sagas_at_start() > 0) {
    fp::LogEvent(
        "info", "resuming unfinished sagas in the background",
        {{"sagas", (*coordinator)->sagas_at_start()}, {"concurrency", kRecoveryConcurrency}});
  }
  (*coordinator)->StartBackground();
  fp::app::Audit audit(**datastore, *coordinator_id, flags.request_deadline_s * 1'000'000);
  {
    // An audit entry left in progress with no unfinished saga to complete it was cut short
    // when its server stopped: on SQLite, whichever server that was (this one holds the
    // database alone); on PostgreSQL, those of this server's earlier run (the same id). Other
    // servers' are the pruner's, after a grace.
    auto cut_short = audit.CompleteCutShort((*datastore)->clock().Now(),
                                            /*own=*/database->engine != DatabaseEngine::kSqlite);
    if (!cut_short) {
      fp::LogEvent("warn", "could not complete the audit entries a stopped server left",
                   {{"error", cut_short.error().message()}});
    } else if (*cut_short > 0) {
      fp::LogEvent("warn", "completed the audit entries of requests the last run left unfinished",
                   {{"entries", *cut_short}});
    }
  }
  // The NAT reconciler's first pass runs at once, off the start path. With several servers on
  // one database, one at a time watches the sleds and repairs the switch's table (a lease
  // each); every server syncs NAT changes (see README, "Several servers").
  // Taken (or found held by another server) now, before the server serves: its renewals then
  // come every half lease, never amid the first requests. On SQLite this server holds the
  // database alone (the file's lock): its tasks need no lease, and renewing one would cost an
  // idle server a durable commit every few seconds.
  const bool shared = database->engine != DatabaseEngine::kSqlite;
  if (shared) {
    (void)watcher_lease.Held();
    (void)nat_lease.Held();
  }
  watcher.Start(fp::loops::SledWatchOptions{.unresponsive_after = std::chrono::seconds(
                                                flags.sled_unresponsive_after_s)},
                shared ? &watcher_lease : nullptr);
  nat.StartBackground(flags.nat_heartbeat_ms, shared ? &nat_lease : nullptr);
  fp::loops::HistoryPruner pruner(
      **datastore,
      fp::loops::HistoryRetention{.retention = std::chrono::seconds(flags.history_retention_s),
                                  .period = std::chrono::seconds(flags.history_prune_interval_s)});
  pruner.Start();
  AllocatorTrimmer trimmer((*datastore)->clock());

  fp::http::HttpServerOptions options;
  options.thread_name = "api";
  options.host = address->host;
  options.clock = &(*datastore)->clock();
  options.random = &(*datastore)->random();
  options.port = address->port;
  options.max_connections = flags.max_connections;
  options.max_connections_per_client = flags.max_connections_per_client;
  options.request_timeout = std::chrono::milliseconds(flags.request_timeout_ms);
  options.idle_timeout = std::chrono::milliseconds(flags.idle_timeout_ms);
  options.tls = tls;
  // Scraped and probed all the time: at debug, like the agents' polls.
  options.quiet_paths = {"/metrics", "/v1/ping"};
  // Set once the server runs; read by /metrics, which only a running server can serve.
  std::atomic<fp::http::HttpServer*> serving{nullptr};
  fp::app::Idempotency idempotency(**datastore);
  fp::app::SagaList sagas(**datastore);
  fp::app::StoreStats store_stats(**datastore);
  fp::app::Users users(
      **datastore, fp::app::SessionPolicy{
                       .idle_timeout = std::chrono::seconds(flags.session_idle_timeout_s),
                       .absolute_timeout = std::chrono::seconds(flags.session_absolute_timeout_s)});
  fp::api::Services services{silos,
                             projects,
                             ip_pools,
                             floating_ips,
                             tokens,
                             users,
                             &instances,
                             &sleds,
                             idempotency,
                             audit,
                             sagas,
                             store_stats,
                             (*datastore)->clock()};
  ServerMetricsSources metrics_sources{executor, nat, watcher, **datastore, fp::app::SagaNames()};
  auto server = fp::http::HttpServer::Start(
      options, fp::api::WithConsole(fp::api::MakeApiHandler(
                                        services,
                                        [&serving] {
                                          fp::http::HttpServer* s = serving.load();
                                          return s ? s->stats() : fp::http::HttpServerStats{};
                                        },
                                        [&metrics_sources](std::string& out) {
                                          RenderServerMetrics(out, metrics_sources);
                                        }),
                                    *console));
  if (!server) {
    std::cerr << "floatplane server: " << server.error().message() << "\n";
    executor.Quiesce();
    return 1;
  }
  serving = server->get();
  std::string url = fmt::format("{}://{}:{}", tls ? "https" : "http",
                                fp::http::UrlHost(address->host), (*server)->port());
  std::cout << "listening on " << url << std::endl;
  if (flags.dev) PrintDevBanner(url, token_file, *console != nullptr);
  fp::LogEvent("info", "serving",
               {{"url", url},
                {"tls_certificate", tls ? tls->Describe() : std::string("none (plain HTTP)")},
                {"console", *console ? (*console)->dir().string() : std::string("none")},
                {"data_dir", data_dir},
                {"database", DescribeDatabase(*database)},
                {"coordinator_id", *coordinator_id},
                {"admin_token_file", token_file.string()}});

  WaitForStopSignal(stop_signals, [&] {
    // (Without a config file there are no switch agents to read again; say so only when SIGHUP
    // has nothing else to do.)
    if (!flags.config_file.empty() || !tls) ReloadSwitchAgents(flags, processes, nat);
    if (tls) ReloadTlsCertificate(*tls);
  });
  (*server)->Stop();
  // No request runs a saga any more. Sagas still recovering stop before their next node (an
  // agent call in progress ends within --agent-timeout-ms) and resume at the next start.
  executor.Quiesce();
  (*coordinator)->Stop();
  watcher.Stop();
  watcher_lease.Release();
  nat.StopBackground();
  pruner.Stop();
  fp::LogEvent("info", "stopped");
  return 0;
}

}  // namespace fp::cmd
