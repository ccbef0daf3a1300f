// The `server` subcommand's flags and their documentation (`floatplane server --help`).

#include <fmt/format.h>
#include <toml++/toml.h>

#include <map>

#include "cmd/process.h"
#include "cmd/server.h"

namespace fp::cmd {

CLI::App* AddServerCommand(CLI::App& app, ServerFlags& flags) {
  // CLI11 reads the file after the command line and sets only what the command line did not.
  app.set_config("--config", "",
                 "TOML or INI file of `server` settings: a [server] section whose keys are the "
                 "long flags' names without the leading dashes (database = \"postgres://...\", "
                 "sled-agent = "
                 "[\"http://...\", ...], dev = true); flags on the command line win")
      ->type_name("FILE");
  app.allow_config_extras(CLI::config_extras_mode::error);
  CLI::App* server = app.add_subcommand("server", "Run the API server");
  server->fallthrough();  // `floatplane server --config FILE`
  server->footer(
      "Settings may also come from a file: floatplane server --config FILE (see "
      "floatplane --help).");
  server->add_flag("--dev", flags.dev,
                   "Embedded defaults for what is not given: the SQLite database in --data-dir "
                   "and simulated agents in this process (without --dev, --database, "
                   "--switch-agent and --sled-agent are required)");
  // The last occurrence wins, so wrappers (scripts/dev) can pass defaults that users override.
  server
      ->add_option("--data-dir", flags.data_dir,
                   "Directory for the admin-token file and the default SQLite database")
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  server
      ->add_option("--database", flags.database,
                   "postgres://USER[:PASSWORD]@HOST[:PORT][,HOST2[:PORT2]...]/DB[?PARAMS] (libpq "
                   "URL; several servers may share it; add target_session_attrs=read-write with "
                   "several hosts), or sqlite:PATH; default: the SQLite file "
                   "DATA_DIR/floatplane.db")
      ->type_name("URL")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  server->add_flag("--mint-admin-token", flags.mint_admin_token,
                   "Mint a new fleet admin token into DATA_DIR/admin-token at start, even though "
                   "the database has one (when the token the bootstrap wrote is lost)");
  // Not a config file key: a deployment's file would turn every start into a migration.
  server
      ->add_flag("--migrate-only", flags.migrate_only,
                 "Bring the database's schema up to this version (as every start does), print "
                 "the version and exit: no bootstrap, no agents, nothing listens. For a "
                 "deployment that upgrades the schema as a step of its own")
      ->configurable(false);
  server
      ->add_option("--listen", flags.listen,
                   "ADDRESS:PORT to serve on, an IPv4 or [IPv6] address (port 0 picks a free port)")
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  server
      ->add_option("--tls-cert", flags.tls_cert,
                   "Serve HTTPS (TLS 1.2 and 1.3) with this certificate: a PEM file with the "
                   "server's certificate first, then any intermediate ones. Needs --tls-key; both "
                   "are read again on SIGHUP, for new connections (default: plain HTTP)")
      ->type_name("FILE")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  server
      ->add_option("--tls-key", flags.tls_key,
                   "The unencrypted PEM private key of --tls-cert (keep it readable by this "
                   "server's user only)")
      ->type_name("FILE")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  server
      ->add_option("--console-dir", flags.console_dir,
                   "Serve the web console from this directory at / (a built console: "
                   "`npm run build` in console/ makes console/dist; read once at start). Default: "
                   "the console installed beside the binary (BINDIR/../share/floatplane/console), "
                   "if there is one; else the API only")
      ->type_name("DIR")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  server->add_option("--switch-agent", flags.switch_agents,
                     "URL of a switch agent; repeat for each switch: every one carries every NAT "
                     "entry (with --dev, default: two simulated ones in this process). Those of "
                     "the --config file are read again on SIGHUP");
  server->add_option("--sled-agent", flags.sled_agents,
                     "URL of a sled agent; repeat for each sled (with --dev, default: two "
                     "simulated ones in this process)");
  server
      ->add_option("--agent-secret-file", flags.agent_secret_file,
                   "File whose first line is the secret presented on every call to an agent, "
                   "which obeys only callers that present it (give the agents the same file: "
                   "--secret-file). Required without --dev; with --dev, the agents simulated in "
                   "this process get a random one")
      ->type_name("FILE")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  server
      ->add_option("--agent-timeout-ms", flags.agent_timeout_ms,
                   "Deadline of every call to an agent")
      ->check(CLI::Range(50, 60000))
      ->capture_default_str();
  server
      ->add_option("--nat-heartbeat-ms", flags.nat_heartbeat_ms,
                   "How often each switch agent is asked where its NAT table is: a switch that "
                   "restarted empty, fell behind or drifted is brought back within about this")
      ->check(CLI::Range(10, 3'600'000))
      ->capture_default_str();
  // A duration: a number with a unit s, m, h or d (seconds without one), from 1 s to
  // `max_s`, shown with `default_text`.
  const std::map<std::string, int64_t> duration_units = {
      {"s", 1}, {"m", 60}, {"h", 3600}, {"d", 24 * 3600}};
  auto add_duration = [&](const std::string& name, int64_t& seconds, const std::string& help,
                          int64_t max_s, const std::string& default_text) {
    server->add_option(name, seconds, help)
        ->transform(CLI::AsNumberWithUnit(duration_units, CLI::AsNumberWithUnit::CASE_SENSITIVE)
                        .description(""))
        ->check(CLI::Range(int64_t{1}, max_s).description(""))
        ->default_str(default_text)
        ->type_name("DURATION");
  };
  constexpr int64_t kDay = 24 * 3600;
  add_duration("--history-retention", flags.history_retention_s,
               "How long finished sagas (done, unwound) and Idempotency-Key records are kept "
               "before a background task deletes them: a number with a unit s, m, h or d (e.g. "
               "12h), from 1s to 3650d; stuck sagas are kept until repaired",
               3650 * kDay, "3d");
  add_duration("--history-prune-interval", flags.history_prune_interval_s,
               "How often that task runs (same units, from 1s to 1d)", kDay, "1m");
  add_duration("--sled-unresponsive-after", flags.sled_unresponsive_after_s,
               "A sled whose agent has not answered for this long has lost its instances as far "
               "as anyone can tell: they are failed (their NAT removed) so that they can be "
               "started elsewhere (same units, from 1s to 1d; a silent sled gets no new "
               "instances meanwhile)",
               kDay, "1m");
  add_duration("--request-deadline", flags.request_deadline_s,
               "How long after its arrival a request may still make its change: one that waited "
               "longer (queued behind others, a slow database) is answered 503 with nothing "
               "changed, since its client has likely given up (same units, from 1s to 1h; a saga "
               "once started runs to its end)",
               3600, "30s");
  add_duration("--session-idle-timeout", flags.session_idle_timeout_s,
               "A console session (POST /v1/login/SILO/local) unused this long ends (same units, "
               "up to 30d)",
               30 * 24 * 3600, "1h");
  add_duration("--session-absolute-timeout", flags.session_absolute_timeout_s,
               "A console session ends this long after its login, however much it is used (same "
               "units, up to 30d)",
               30 * 24 * 3600, "24h");
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
  server->add_option("--coordinator-id", flags.coordinator_id,
                     "This server's saga coordinator id, unique among the servers of one "
                     "database: at most 128 characters, without '@', '#', spaces or control "
                     "characters (default: the one kept in DATA_DIR/coordinator-id)");
  server
      ->add_option("--lease-ttl-ms", flags.lease_ttl_ms,
                   "Validity of the coordinator lease, renewed every fifth of it; another server "
                   "adopts this one's sagas once it expired and --lease-grace-ms passed")
      ->check(CLI::Range(100, 600'000))
      ->capture_default_str();
  server
      ->add_option("--lease-grace-ms", flags.lease_grace_ms,
                   "Wait after a lease expired before adopting its sagas (covers clock skew)")
      ->check(CLI::Range(0, 600'000))
      ->capture_default_str();
  server
      ->add_option("--postgres-pool-size", flags.postgres_pool_size,
                   "PostgreSQL connections this server runs its transactions on at once (more "
                   "wait for one); leave room under the database's max_connections for every "
                   "server's. More connections than the database has cores take turns there "
                   "(README, Configuration)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  AddLogLevelOption(*server, flags.log_level,
                    "routine polls of the agents, which show in /metrics instead");
  server->add_flag("--enable-test-faults", flags.enable_test_faults,
                   "Tests only: apply saga faults from FLOATPLANE_TEST_SAGA_FAULTS and a "
                   "slow log sync from FLOATPLANE_TEST_SYNC_DELAY_MS");
  return server;
}

std::optional<std::string> CoordinatorIdProblem(std::string_view id) {
  if (id.size() > 128) return "may be at most 128 characters long";
  for (char c : id) {
    // A task lease's holder is named `<id>@<process>#<tenure>` (db/leases.h): an id with either
    // mark would read as another server's process, or hide which server holds the lease.
    if (c == '@') {
      return "may not contain '@', which begins the process part of its task leases' holder "
             "names";
    }
    if (c == '#') {
      return "may not contain '#', which begins the tenure part of its task leases' holder names";
    }
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) {
      return "may not contain spaces or control characters";
    }
  }
  return std::nullopt;
}

std::optional<std::string> RefusedFlags(const ServerFlags& flags) {
  if (!flags.dev) {
    // A production server names what it runs on; only --dev makes things up. A migration
    // alone needs only the database.
    for (auto [missing, name] :
         {std::pair{flags.database.empty(), "--database"},
          std::pair{flags.switch_agents.empty() && !flags.migrate_only, "--switch-agent"},
          std::pair{flags.sled_agents.empty() && !flags.migrate_only, "--sled-agent"},
          std::pair{flags.agent_secret_file.empty() && !flags.migrate_only,
                    "--agent-secret-file"}}) {
      if (missing) {
        return fmt::format(
            "{} (or `{}` in the config file's [server] section) is required without --dev; "
            "--dev runs on embedded defaults (see README.md, Configuration)",
            name, std::string_view(name).substr(2));
      }
    }
  }
  if (flags.migrate_only && flags.mint_admin_token) {
    return "--mint-admin-token needs a server start; --migrate-only bootstraps nothing: run the "
           "migration, then start the server with --mint-admin-token";
  }
  if (!flags.coordinator_id.empty()) {
    if (std::optional<std::string> bad = CoordinatorIdProblem(flags.coordinator_id)) {
      return fmt::format("--coordinator-id {:?}: {}", flags.coordinator_id, *bad);
    }
  }
  if (flags.tls_cert.empty() != flags.tls_key.empty()) {
    return fmt::format("{} needs {}: HTTPS takes a certificate and its private key",
                       flags.tls_cert.empty() ? "--tls-key" : "--tls-cert",
                       flags.tls_cert.empty() ? "--tls-cert" : "--tls-key");
  }
  return std::nullopt;
}

Result<std::optional<std::vector<std::string>>> ReadSwitchAgents(const std::string& path) {
  using Out = std::optional<std::vector<std::string>>;
  toml::table parsed;
  try {
    parsed = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    return Fail(Error::InvalidRequest(fmt::format("{}: {}", path, e.description())));
  }
  toml::node_view<toml::node> setting = parsed["server"]["switch-agent"];
  if (!setting) return Out();
  std::vector<std::string> urls;
  if (auto one = setting.value<std::string>()) {
    urls.push_back(*one);
  } else if (toml::array* list = setting.as_array()) {
    for (const toml::node& element : *list) {
      auto url = element.value<std::string>();
      if (!url) {
        return Fail(Error::InvalidRequest(
            fmt::format("{}: [server] switch-agent: expected strings (URLs)", path)));
      }
      urls.push_back(*url);
    }
  } else {
    return Fail(Error::InvalidRequest(
        fmt::format("{}: [server] switch-agent: expected a URL or a list of URLs", path)));
  }
  return Out(std::move(urls));
}

}  // namespace fp::cmd
