#pragma once

// The datastore's schema migrations (schema.cc).

#include <cstddef>

#include "common/error.h"
#include "db/postgres/connection.h"
#include "db/sqlite/connection.h"

namespace fp::db {

// The newest schema version this binary knows (both engines' migration lists are this long).
size_t LatestSchemaVersion();

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
