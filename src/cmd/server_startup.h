#pragma once

// What a server does before it serves (server_startup.cc), each step apart from RunServer's
// wiring: its console and datastore opened, its coordinator id and admin token kept, the test
// faults it was asked for, and what it tells its operator.

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "app/tokens.h"
#include "cmd/database_url.h"
#include "cmd/server.h"
#include "common/error.h"
#include "http/static_site.h"
#include "saga/recovery.h"
#include "saga/saga.h"

namespace fp::db {
class Datastore;
class OpenInterrupt;
struct PostgresOptions;
}  // namespace fp::db

namespace fp::cmd {

// Test-only saga faults, from FLOATPLANE_TEST_SAGA_FAULTS (JSON), honoured only with
// --enable-test-faults: {"saga": NAME, "fail_node": N, "fail_node_after_effect": N,
// "repeat_every_action": true, "repeat_undo_node": N, "fail_undo_node": N,
// "exit_after_node": N, "exit_in_node": N, "exit_after_undo_node": N, "exit_in_undo_node": N}
// (saga.h's FaultPlan). Also FLOATPLANE_TEST_SYNC_DELAY_MS (see RunServer).
std::optional<fp::saga::FaultPlan> TestFaultsFromEnvironment();

// The saga coordinator id: --coordinator-id, else the one kept in DATA_DIR/coordinator-id,
// made (a random UUID) and written there on first start. Kept so that a restarted server is the
// same coordinator and takes its own sagas back at once, instead of waiting for another server
// (or itself) to adopt them after the lease expired.
fp::Result<std::string> CoordinatorId(const ServerFlags& flags, const std::filesystem::path& dir);

// Logs where a recovered saga came to rest; a saga that cannot resume, at level error.
void LogRecovery(const fp::saga::RecoveryEvent& e);

// Opens the datastore `database` names, migrating it. Errors name the --database setting.
// The composition root's choice of time and randomness (the machine's) starts here: every part
// of the server reads them from the datastore (clock(), random()). `postgres` applies on
// PostgreSQL only; `interrupt` stops the migration from another thread (db::OpenInterrupt).
Result<std::unique_ptr<fp::db::Datastore>> OpenDatastore(const DatabaseSetting& database,
                                                         const fp::db::PostgresOptions& postgres,
                                                         fp::db::OpenInterrupt* interrupt);

// Makes sure the operator holds a fleet admin token: the first server on a database creates
// silo `default` and mints one into DATA_DIR/admin-token (only one of several servers starting
// together on one database does: Tokens::BootstrapDev). Later starts mint only when asked to
// (--mint-admin-token) or when a SQLite database's own data dir lost the file; on PostgreSQL a
// missing file is the normal state of every server but the one that bootstrapped, so it is
// logged and left alone. Errors: the datastore's, or the file's.
Status EnsureAdminToken(fp::app::Tokens& tokens, const ServerFlags& flags,
                        const DatabaseSetting& database, const std::filesystem::path& token_file);

// SRV-1: what a new user needs to drive the dev server from another terminal, on stdout after
// the address line. Never the token itself: the line reads it from its file.
void PrintDevBanner(const std::string& url, const std::filesystem::path& token_file, bool console);

// The console to serve: --console-dir's, else the one installed beside the binary, else none.
// A --console-dir that cannot be served is an error (the operator asked for it).
fp::Result<std::shared_ptr<const fp::http::StaticSite>> LoadConsole(const std::string& flag);

}  // namespace fp::cmd
