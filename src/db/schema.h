#pragma once

// The datastore's schema migrations (schema.cc: SQLite; schema_postgres.cc: PostgreSQL).

#include <cstddef>

#include "common/error.h"
#include "db/postgres/connection.h"
#include "db/sqlite/connection.h"

namespace fp::db {

// The newest schema version this binary knows: both engines' migration lists (schema.cc for
// SQLite, schema_postgres.cc for PostgreSQL) are this long, and a migration adds to both.
inline constexpr size_t kSchemaVersion = 13;
inline size_t LatestSchemaVersion() { return kSchemaVersion; }

// Brings the database to the newest schema, one migration per transaction.
Status MigrateSchema(sqlite::SqliteConnection& conn);
// Up to schema version `target` only (tests: build an old database to upgrade).
Status MigrateSchemaTo(sqlite::SqliteConnection& conn, size_t target);

// The same for PostgreSQL, all pending migrations in one transaction under an advisory lock
// (servers starting together do not race). Errors: Internal when the database's schema is
// newer than this binary knows, or a statement failed (nothing is applied then).
Status MigratePostgresSchema(postgres::PgConnection& conn);
Status MigratePostgresSchemaTo(postgres::PgConnection& conn, size_t target);

}  // namespace fp::db
