#pragma once

// `floatplane server`: the API server with its datastore, saga executor, background work and
// agents (external ones by URL, or simulated ones in this process).

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "http/server.h"

namespace fp::cmd {

// The settings of `floatplane server`, from its flags or the [server] section of the --config
// file (a key per flag, named like it: `database = "postgres://..."`); a flag given on the
// command line wins over the file.
//
// --dev fills in what is not given with embedded defaults: the SQLite database in the data
// dir and simulated agents in this process. Without --dev, --database, --switch-agent and
// --sled-agent are required. In both modes the first server on a database bootstraps it
// (silo `default` and a fleet admin token written to DATA_DIR/admin-token; see RunServer).
struct ServerFlags {
  bool dev = false;
  std::string data_dir = ".floatplane-dev";
  // postgres://... (libpq URL, multi-host included), sqlite:PATH, or empty: the SQLite file
  // DATA_DIR/floatplane.db (see cmd/database_url.h).
  std::string database;
  // Mint a new fleet admin token into DATA_DIR/admin-token at start even though the database
  // was bootstrapped already (the operator's way back in after losing the token).
  bool mint_admin_token = false;
  // Bring the database's schema up to this version, print the version, and exit: nothing else
  // is written (no bootstrap, no admin token), no agent is needed and nothing listens.
  bool migrate_only = false;
  std::string listen = "127.0.0.1:12220";
  // PEM files: serve HTTPS with them (both or neither); read again on SIGHUP.
  std::string tls_cert;
  std::string tls_key;
  // A built console (console/dist) served at `/`; empty: the one installed beside the binary
  // (BINDIR/../share/floatplane/console), if any.
  std::string console_dir;
  // URLs, one per switch (a rack has two); empty: two in-process simulated switch agents.
  std::vector<std::string> switch_agents;
  std::vector<std::string> sled_agents;  // URLs; empty: two in-process simulated sled agents
  // The secret every call to an agent presents (its first line); the agents are given the same
  // file. Empty with --dev: a random one for the agents simulated in this process.
  std::string agent_secret_file;
  // Short enough that an operation whose agent hangs (one call, then its undo's) still
  // answers within 10 s.
  int agent_timeout_ms = 2000;
  // Each switch agent is asked where it is this often (loops::NatReconciler's heartbeat): a
  // switch that restarted empty is noticed within it.
  int nat_heartbeat_ms = 100;
  bool enable_test_faults = false;
  // Finished sagas and idempotency keys older than this are deleted (seconds; see
  // loops/history_pruner.h), checked every history_prune_interval_s.
  int64_t history_retention_s = 3 * 24 * 3600;
  int64_t history_prune_interval_s = 60;
  // A sled whose agent has not answered for this long has its instances failed (seconds; see
  // loops::SledWatchOptions::unresponsive_after).
  int64_t sled_unresponsive_after_s = 60;
  // How long after its arrival a request's change may still be made (seconds; see
  // db::RequestEffect's deadline).
  int64_t request_deadline_s = 30;
  // A console session ends after this long unused, and this long after login however used.
  int64_t session_idle_timeout_s = 3600;
  int64_t session_absolute_timeout_s = 24 * 3600;
  // Connection admission (see fp::http::HttpServerOptions).
  int max_connections = fp::http::HttpServerOptions{}.max_connections;
  int max_connections_per_client = fp::http::HttpServerOptions{}.max_connections_per_client;
  int request_timeout_ms = 10'000;
  int idle_timeout_ms = 60'000;
  // Several servers on one database (app/saga_coordinator.h): this server's saga coordinator
  // id (empty: the one kept in DATA_DIR/coordinator-id, made on first start), its lease's
  // validity and the grace after its expiry before other servers adopt its sagas.
  std::string coordinator_id;
  int lease_ttl_ms = 5000;
  int lease_grace_ms = 2000;
  // On PostgreSQL, the connections this server's transactions run on at once
  // (db::PostgresOptions::pool_size, whose default this is).
  int postgres_pool_size = 16;
  // debug, info, warn or error (fp::LogLevel). At info, routine exchanges with the agents are
  // not logged (they show in /metrics); what changes something, fails or repairs drift is.
  std::string log_level = "info";
  // The --config file, if one was given: SIGHUP reads its switch agents again.
  std::string config_file;
};

// Adds the `server` subcommand, whose flags fill `flags`, and the `--config FILE` option that
// reads its settings from a TOML or INI file (CLI11's format; the keys of `server` in its
// [server] section; an unknown key is an error). `floatplane server --config FILE` works:
// the subcommand passes --config on to `app`. Returns the subcommand (to ask whether it ran).
CLI::App* AddServerCommand(CLI::App& app, ServerFlags& flags);

// Why these flags, together, cannot start a server (a usage error, exit 2), as the message to
// print after "floatplane server: "; nullopt when they can. Only what needs no file or network:
// what is required without --dev, flags that exclude each other, --tls-cert without --tls-key.
std::optional<std::string> RefusedFlags(const ServerFlags& flags);
// What is wrong with a coordinator id (--coordinator-id, or DATA_DIR/coordinator-id), if
// anything: '@' or '#' (they begin a task lease holder's process and tenure parts), spaces or
// control characters, more than 128 characters.
std::optional<std::string> CoordinatorIdProblem(std::string_view id);

// The `switch-agent` setting of the [server] section of the config file at `path` (a URL or a
// list of them), or nullopt if it has none. InvalidRequest naming the file for a file that is
// not TOML or a setting that is not strings.
Result<std::optional<std::vector<std::string>>> ReadSwitchAgents(const std::string& path);

// Runs the server until SIGINT or SIGTERM (SIGHUP reads the switch agents again). Returns the
// process's exit status: 0 after a clean stop, 1 when it could not start, 2 for a usage error.
int RunServer(const ServerFlags& flags);

}  // namespace fp::cmd
