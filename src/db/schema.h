#pragma once

// The datastore's schema migrations (SQLite's: schema_sqlite_migrations.cc, applied by
// schema.cc; PostgreSQL's: schema_postgres.cc).

#include <cstddef>
#include <string>
#include <string_view>

#include "common/error.h"
#include "db/open_interrupt.h"
#include "db/postgres/connection.h"
#include "db/sqlite/connection.h"

namespace fp::db {

// The newest schema version this binary knows: both engines' migration lists
// (schema_sqlite_migrations.cc, schema_postgres.cc) are this long. A migration is written once, for
// SQLite, and PostgreSQL runs it in its dialect (PostgresDialect) unless it needs its own.
inline constexpr size_t kSchemaVersion = 19;
inline size_t LatestSchemaVersion() { return kSchemaVersion; }

// SQLite's migration to schema version `version` (1 to kSchemaVersion), as SQLite runs it.
std::string_view SqliteMigration(size_t version);
// Migration 1's text: the tables of silos, projects, IP pools (their ranges and silo links),
// external IPs, the allocator's free spans and SNAT addresses, and tokens.
std::string_view SqliteFirstSchema();

// A migration written for SQLite in PostgreSQL's dialect: INTEGER becomes BIGINT, BLOB BYTEA,
// TEXT is compared byte by byte as SQLite compares it (COLLATE "C"), and a table's STRICT and
// ", WITHOUT ROWID" go; literals, quoted names and comments stay as they are. Internal for what
// it cannot translate faithfully: types not in capitals, COLLATE, ROWID elsewhere,
// AUTOINCREMENT, INTEGER PRIMARY KEY (SQLite assigns its ids), a cast to TEXT. Every other
// statement must mean the same on both engines.
Result<std::string> PostgresDialect(std::string_view sqlite_sql);

// Brings the database to the newest schema, one migration per transaction. With `interrupt`,
// Interrupt() cancels the statement running (the connection is armed with it) and no
// migration begins after it: the one under way rolls back, those before it stay, and the call
// fails Unavailable.
Status MigrateSchema(sqlite::SqliteConnection& conn, OpenInterrupt* interrupt = nullptr);
// Up to schema version `target` only (tests: build an old database to upgrade).
Status MigrateSchemaTo(sqlite::SqliteConnection& conn, size_t target,
                       OpenInterrupt* interrupt = nullptr);

// The same for PostgreSQL, all pending migrations in one transaction under an advisory lock
// (servers starting together do not race). Errors: Internal when the database's schema is
// newer than this binary knows, or a statement failed (nothing is applied then); Unavailable
// when `interrupt` stopped it (nothing is applied either).
Status MigratePostgresSchema(postgres::PgConnection& conn, OpenInterrupt* interrupt = nullptr);
Status MigratePostgresSchemaTo(postgres::PgConnection& conn, size_t target,
                               OpenInterrupt* interrupt = nullptr);

}  // namespace fp::db
