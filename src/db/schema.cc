// SQLite's migrations applied (their texts: schema_sqlite_migrations.cc; PostgreSQL's:
// schema_postgres.cc). Each migration runs once, in order, inside one transaction together with
// the bump of schema_version.

#include "db/schema.h"

#include <fmt/format.h>

#include <algorithm>

namespace fp::db {

namespace {

// The migration to `version` was stopped by OpenInterrupt and rolled back.
Error Interrupted(size_t version) {
  return Error::Unavailable(fmt::format(
      "interrupted while migrating the schema to version {}: that migration was rolled back",
      version));
}

// Stops at a migration's edge once `interrupt` fired (honouring it); a statement it cancelled
// fails, and that is reported as the interrupt too.
Status MigrateWithForeignKeysOff(sqlite::SqliteConnection& conn, size_t target,
                                 OpenInterrupt* interrupt) {
  const auto stop_at_edge = [interrupt](size_t version) -> Status {
    if (interrupt == nullptr || !interrupt->interrupted()) return Ok();
    interrupt->Honour();
    return Fail(Interrupted(version));
  };
  for (;;) {
    FP_CHECK_OK(conn.ExecScript("BEGIN IMMEDIATE"));
    auto rows = conn.Query("SELECT max(version) FROM schema_version", {});
    if (!rows) {
      (void)conn.ExecScript("ROLLBACK");
      return Fail(rows.error());
    }
    size_t current =
        rows->empty() || rows->front().IsNull(0) ? 0 : static_cast<size_t>(rows->front().Int(0));
    if (current > kSchemaVersion) {
      (void)conn.ExecScript("ROLLBACK");
      return Fail(Error::Internal(
          fmt::format("database schema version {} is newer than this binary knows ({})", current,
                      kSchemaVersion)));
    }
    if (current >= target) return conn.ExecScript("COMMIT");
    Status applied = stop_at_edge(current + 1);
    if (applied) applied = conn.ExecScript(SqliteMigration(current + 1));
    if (applied) {
      auto broken = conn.Query("PRAGMA foreign_key_check", {});
      if (!broken) {
        applied = Fail(broken.error());
      } else if (!broken->empty()) {
        applied =
            Fail(Error::Internal(fmt::format("migration {} would break a foreign key (table {})",
                                             current + 1, broken->front().Text(0))));
      }
    }
    if (applied) {
      applied = conn.ExecScript(
          fmt::format("INSERT INTO schema_version (version) VALUES ({})", current + 1));
    }
    // Past this point the migration commits: an interrupt now is too late for it.
    if (applied) applied = stop_at_edge(current + 1);
    if (applied) applied = conn.ExecScript("COMMIT");
    if (!applied) {
      (void)conn.ExecScript("ROLLBACK");
      // A migration that edits sqlite_schema (16) and failed before its own RESET: schema
      // writing off again, and the schema as the rollback left it.
      (void)conn.ExecScript("PRAGMA writable_schema = RESET");
      if (interrupt != nullptr && conn.interrupted_ever()) {
        interrupt->Honour();
        return Fail(Interrupted(current + 1));  // SQLite says only "interrupted"
      }
      return applied;
    }
  }
}

}  // namespace

Status MigrateSchema(sqlite::SqliteConnection& conn, OpenInterrupt* interrupt) {
  return MigrateSchemaTo(conn, kSchemaVersion, interrupt);
}

Status MigrateSchemaTo(sqlite::SqliteConnection& conn, size_t target, OpenInterrupt* interrupt) {
  OpenInterrupt::Armed armed(
      interrupt, [&conn] { conn.Interrupt(); }, OpenInterrupt::Needs::kConnection);
  FP_CHECK_OK(conn.ExecScript(
      "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL) STRICT"));
  // Rebuilding a table (create, copy, drop, rename) needs foreign keys off, which SQLite only
  // allows outside a transaction; each migration checks them itself before it commits.
  FP_CHECK_OK(conn.ExecScript("PRAGMA foreign_keys=OFF"));
  Status migrated = MigrateWithForeignKeysOff(conn, std::min(target, kSchemaVersion), interrupt);
  Status restored = conn.ExecScript("PRAGMA foreign_keys=ON");
  Status done = !migrated ? migrated : restored;
  if (!done && interrupt != nullptr && !interrupt->honoured() && conn.interrupted_ever()) {
    // The statement cancelled was one between migrations (a BEGIN, a PRAGMA).
    interrupt->Honour();
    return Fail(Error::Unavailable(
        "interrupted while migrating the schema, between two migrations: none was under way"));
  }
  return done;
}

}  // namespace fp::db
