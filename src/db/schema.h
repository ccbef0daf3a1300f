#pragma once

// The datastore's schema migrations (schema.cc).

#include <cstddef>

#include "common/error.h"
#include "db/sqlite/connection.h"

namespace fp::db {

// Brings the database to the newest schema, one migration per transaction.
Status MigrateSchema(sqlite::SqliteConnection& conn);
// Up to schema version `target` only (tests: build an old database to upgrade).
Status MigrateSchemaTo(sqlite::SqliteConnection& conn, size_t target);

}  // namespace fp::db
