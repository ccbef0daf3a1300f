// PostgreSQL's schema and its migrations: the same versions as SQLite's
// (schema_sqlite_migrations.cc), in PostgreSQL's dialect. Every pending migration runs in one
// transaction under a lock.

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <string_view>

#include "db/postgres/connection.h"
#include "db/schema.h"
#include "db/schema_postgres_functions.h"

namespace fp::db {

namespace {

// A migration as PostgreSQL runs it: SQLite's of the same version in PostgreSQL's dialect
// (PostgresDialect) followed by `sql`, or `sql` alone where the engines differ.
struct PgMigration {
  bool as_on_sqlite = false;
  std::string_view sql;
};
constexpr PgMigration AsOnSqlite(std::string_view and_then = {}) { return {true, and_then}; }
constexpr PgMigration Own(std::string_view sql) { return {false, sql}; }

// PostgreSQL's schema (db/postgres/): one entry per SQLite version, so that a version number
// means the same schema on both engines. A migration is written once, in SQLite's dialect
// (schema_sqlite_migrations.cc), unless PostgreSQL needs other statements (Own).
constexpr std::array<PgMigration, 19> kPostgresMigrations = {
    // 1: as SQLite's, plus the PostgreSQL engine's own table: each write transaction inserts
    // a row with a UUID of its own, so that a COMMIT whose answer was lost can be resolved by
    // looking for it. Rows older than an hour are deleted by the engine.
    AsOnSqlite(R"sql(
CREATE TABLE commit_marker (
  id TEXT COLLATE "C" PRIMARY KEY,
  time_created TIMESTAMPTZ NOT NULL
);
CREATE INDEX commit_marker_by_age ON commit_marker (time_created);
)sql"),
    // 2: the saga log.
    AsOnSqlite(),
    // 3: sleds, VPCs, instances and network interfaces, the NAT table, idempotency keys.
    AsOnSqlite(),
    // 4: nat_entry keyed by version_added. (SQLite's rebuild of saga without a rowid has no
    // counterpart here.)
    Own(R"sql(
CREATE TABLE nat_entry_v4 (
  version_added BIGINT PRIMARY KEY,
  id TEXT COLLATE "C" NOT NULL UNIQUE,
  external_ip BYTEA NOT NULL,
  first_port BIGINT NOT NULL,
  last_port BIGINT NOT NULL,
  sled_address BYTEA NOT NULL,
  vni BIGINT NOT NULL,
  mac TEXT COLLATE "C" NOT NULL,
  instance_id TEXT COLLATE "C" NOT NULL,
  version_removed BIGINT,
  time_created BIGINT NOT NULL,
  time_deleted BIGINT
);
INSERT INTO nat_entry_v4 (version_added, id, external_ip, first_port, last_port, sled_address,
                          vni, mac, instance_id, version_removed, time_created, time_deleted)
  SELECT version_added, id, external_ip, first_port, last_port, sled_address, vni, mac,
         instance_id, version_removed, time_created, time_deleted FROM nat_entry;
DROP TABLE nat_entry;
ALTER TABLE nat_entry_v4 RENAME TO nat_entry;
CREATE UNIQUE INDEX nat_entry_live ON nat_entry (external_ip, first_port, last_port)
  WHERE version_removed IS NULL;
CREATE INDEX nat_entry_by_instance ON nat_entry (instance_id) WHERE version_removed IS NULL;
CREATE UNIQUE INDEX nat_entry_removed ON nat_entry (version_removed)
  WHERE version_removed IS NOT NULL;
)sql"),
    // 5: idempotency records 'done' or 'saga'.
    AsOnSqlite(),
    // 6: bounded history; saga_rows follows the saga table's row count (a PL/pgSQL trigger).
    Own(R"sql(
CREATE INDEX saga_finished ON saga (time_modified) WHERE state IN ('done', 'unwound');
INSERT INTO counter (name, value) SELECT 'saga_rows', count(*) FROM saga;
CREATE FUNCTION saga_rows_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    UPDATE counter SET value = value + 1 WHERE name = 'saga_rows';
  ELSE
    UPDATE counter SET value = value - 1 WHERE name = 'saga_rows';
  END IF;
  RETURN NULL;
END;
$$;
CREATE TRIGGER saga_rows_on_insert AFTER INSERT ON saga
  FOR EACH ROW EXECUTE FUNCTION saga_rows_count();
CREATE TRIGGER saga_rows_on_delete AFTER DELETE ON saga
  FOR EACH ROW EXECUTE FUNCTION saga_rows_count();
)sql"),
    // 7: several servers on one database: coordinator leases, task leases, orphan VM removals
    // (SQLite's migration 7 says what each is).
    AsOnSqlite(),
    // 8: the functions behind the operations that run as one statement on PostgreSQL (one round
    // trip instead of an interactive transaction's several; SQLite, in the process, runs them as
    // several statements and has no migration 8). And saga_rows is no longer kept by trigger:
    // every saga insert updating one counter row made concurrent saga creations fail each
    // other under SERIALIZABLE (the benchmark's most frequent retry); SagaHistory counts the
    // rows instead, when metrics are read. retry_queue queues the retries of writes that
    // collided.
    //
    // fp_addr_step: the address key (db/datastore.h: version byte, then the address big-endian)
    // one above (step 1) or one below (step -1) `k`.
    Own(kPostgresMigration8),
    // 9: the audit log, as on SQLite (schema_sqlite_migrations.cc) but for its text columns'
    // collation: written
    // before TEXT meant COLLATE "C" here, and kept so, so that every database has one schema.
    Own(R"sql(
CREATE TABLE audit_log (
  id TEXT NOT NULL PRIMARY KEY,
  time_started BIGINT NOT NULL,
  time_completed BIGINT,
  request_id TEXT NOT NULL,
  request_uri TEXT NOT NULL,
  operation_id TEXT NOT NULL,
  source_ip TEXT NOT NULL,
  user_agent TEXT,
  actor_silo_id TEXT,
  actor_user_id TEXT,
  auth_method TEXT,
  credential_id TEXT,
  result_kind TEXT CHECK (result_kind IN ('success', 'error', 'unknown')),
  http_status BIGINT,
  error_code TEXT,
  error_message TEXT,
  saga_id TEXT,
  saga_completes BIGINT NOT NULL DEFAULT 0,
  server_id TEXT,
  success_status BIGINT NOT NULL
);
CREATE INDEX audit_log_by_completion ON audit_log (time_completed, id)
  WHERE time_completed IS NOT NULL;
CREATE INDEX audit_log_in_progress ON audit_log (saga_id) WHERE time_completed IS NULL;
-- Who started each saga (the request's id and actor, as JSON), and the sagas in the rare
-- states by state (the common ones, done and unwound, are found by a scan of the newest, and
-- saga_finished stays the index their pruning reads).
ALTER TABLE saga ADD COLUMN origin TEXT;
CREATE INDEX saga_by_state ON saga (state, id) WHERE state IN ('running', 'unwinding', 'stuck');
)sql"),
    // 10: sleds an operator can trust and retire (db/sleds.h): the operator's policy
    // (expunged: out of service for good) and whether the sled's agent answers, since when
    // (written when that changes, by the server that watches the sleds; NULL: not yet known).
    AsOnSqlite(),
    // 11: local users and their console sessions, as on SQLite (schema_sqlite_migrations.cc).
    AsOnSqlite(),
    // 12: quotas, as on SQLite (schema_sqlite_migrations.cc).
    AsOnSqlite(),
    // 13: the instance a moving floating IP comes from, as on SQLite (schema_sqlite_migrations.cc).
    AsOnSqlite(),
    // 14: fp_expect_rows, which a write held back to go with a later statement or the COMMIT
    // (PgConnection::ExecLater) uses to fail its own transaction when it changed another number
    // of rows than it must: the check is the server's, so a COMMIT in the same pipeline never
    // runs after a failed one. SQLSTATE FPX01 (floatplane's own class).
    Own(R"sql(
CREATE FUNCTION fp_expect_rows(actual BIGINT, expected BIGINT) RETURNS BIGINT
LANGUAGE plpgsql AS $$
BEGIN
  IF actual <> expected THEN
    RAISE EXCEPTION USING ERRCODE = 'FPX01',
      MESSAGE = format('the write changed %s rows, not %s', actual, expected);
  END IF;
  RETURN actual;
END;
$$;
)sql"),
    // 15: nothing here (SQLite's saga back in a rowid table: PostgreSQL's heap keeps rows of
    // up to about 2 KB in its page).
    Own(""),
    // 16: nothing here (SQLite's IN lists in CHECKs written as ORs: PostgreSQL compares an
    // IN list's values in turn).
    Own(""),
    // 17: instance_by_sled by sled and state, as on SQLite (schema_sqlite_migrations.cc): the
    // placement's count reads only the running instances' entries (and, where the visibility
    // map allows, no row at all).
    AsOnSqlite(),
    // 18: NAT versions from a sequence, taken under the lock of nat_version_turn held to the
    // end of the taking transaction (db/nat.cc): transactions no longer collide on the
    // counter's row, and versions still become visible in order. The counter's row stays as
    // the floor that garbage collection raises. The sequence starts after the counter.
    Own(R"sql(
CREATE SEQUENCE nat_version_seq AS BIGINT MINVALUE 1;
SELECT setval('nat_version_seq',
              coalesce((SELECT value FROM counter WHERE name = 'nat_version'), 1),
              (SELECT value FROM counter WHERE name = 'nat_version') IS NOT NULL);
CREATE TABLE nat_version_turn ();
)sql"),
    // 19: nothing to change, as on SQLite: a done saga's result may be NULL (its last node's
    // event holds it); the version keeps older binaries from starting.
    Own(""),
};
static_assert(kPostgresMigrations.size() == kSchemaVersion,
              "a migration adds one entry to each engine's list");

}  // namespace

Result<std::string> PostgresDialect(std::string_view sqlite_sql) {
  auto word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  auto next_word = [&](size_t at) {
    while (at < sqlite_sql.size() && std::isspace(static_cast<unsigned char>(sqlite_sql[at]))) {
      ++at;
    }
    size_t end = at;
    while (end < sqlite_sql.size() && word_char(sqlite_sql[end])) ++end;
    return std::pair(sqlite_sql.substr(at, end - at), end);
  };
  auto upper = [](std::string_view w) {
    std::string u(w);
    for (char& ch : u) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    return u;
  };
  auto refuse = [](std::string_view what) -> Result<std::string> {
    return Fail(Error::Internal(
        fmt::format("a migration shared with PostgreSQL cannot be translated: {}; give "
                    "PostgreSQL its own text (Own) or write it in the translatable subset",
                    what)));
  };
  std::string out;
  out.reserve(sqlite_sql.size() * 5 / 4);
  std::string_view previous;  // the last word written
  size_t i = 0;
  while (i < sqlite_sql.size()) {
    char c = sqlite_sql[i];
    if (c == '\'' || c == '"' || sqlite_sql.substr(i, 2) == "--" ||
        sqlite_sql.substr(i, 2) == "/*") {
      // A string literal, a quoted name or a comment, as it is.
      size_t end = c == '\'' || c == '"' ? sqlite_sql.find(c, i + 1)
                   : c == '-'            ? sqlite_sql.find('\n', i)
                                         : sqlite_sql.find("*/", i + 2);
      end = end == std::string_view::npos ? sqlite_sql.size() : end + (c == '/' ? 2 : 1);
      out.append(sqlite_sql.substr(i, end - i));
      i = end;
      continue;
    }
    if (c == ',' && next_word(i + 1).first == "WITHOUT") {
      // ", WITHOUT ROWID" after a table's definition: PostgreSQL tables have no rowid.
      auto [rowid, after] = next_word(next_word(i + 1).second);
      if (rowid != "ROWID") return refuse("WITHOUT without ROWID");
      i = after;
      continue;
    }
    if (!word_char(c)) {
      out.push_back(c);
      ++i;
      continue;
    }
    size_t end = i;
    while (end < sqlite_sql.size() && word_char(sqlite_sql[end])) ++end;
    std::string_view word = sqlite_sql.substr(i, end - i);
    const std::string big = upper(word);
    if ((big == "INTEGER" || big == "TEXT" || big == "BLOB") && word != big) {
      return refuse(fmt::format("the type \"{}\" (types are written in capitals)", word));
    }
    if (big == "COLLATE" || big == "ROWID" || big == "AUTOINCREMENT") {
      return refuse(fmt::format("\"{}\" (SQLite's own)", word));
    }
    if (word == "INTEGER") {
      if (next_word(end).first == "PRIMARY") {
        return refuse("INTEGER PRIMARY KEY (SQLite's rowid: assigned ids PostgreSQL would not)");
      }
      out += "BIGINT";
    } else if (word == "BLOB") {
      out += "BYTEA";
    } else if (word == "TEXT") {
      if (upper(previous) == "AS") return refuse("a cast to TEXT");
      out += "TEXT COLLATE \"C\"";
    } else if (word == "STRICT") {
      // ") STRICT": PostgreSQL's columns are always of their declared type.
      while (!out.empty() && (out.back() == ' ' || out.back() == '\t')) out.pop_back();
    } else {
      out.append(word);
    }
    previous = word;
    i = end;
  }
  return out;
}

Status MigratePostgresSchema(postgres::PgConnection& conn, OpenInterrupt* interrupt) {
  return MigratePostgresSchemaTo(conn, kPostgresMigrations.size(), interrupt);
}

Status MigratePostgresSchemaTo(postgres::PgConnection& conn, size_t target,
                               OpenInterrupt* interrupt) {
  // Cancelled, a statement fails (57014) and the transaction rolls back whole; so does a wait
  // for the lock below while another server migrates.
  OpenInterrupt::Armed armed(interrupt, interrupt != nullptr ? conn.Canceller() : nullptr,
                             OpenInterrupt::Needs::kItself);
  const auto stopped = [interrupt] { return interrupt != nullptr && interrupt->interrupted(); };
  bool cut = false;  // stopped here before COMMIT (stopped() stays true once it is)
  // DDL is transactional in PostgreSQL: every pending migration and its schema_version row
  // commit together, under a lock held to the end of the transaction, so that servers starting
  // together apply each migration once and the later ones find the schema up to date.
  FP_CHECK_OK(conn.Run("BEGIN"));
  Status migrated = [&]() -> Status {
    // The key is arbitrary but fixed: "floatplane schema".
    FP_CHECK_OK(conn.Run("SELECT pg_advisory_xact_lock(7236828283516204641)"));
    FP_CHECK_OK(conn.Run("CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)"));
    auto rows = FP_TRY(conn.Query("SELECT max(version) FROM schema_version", {}));
    size_t current =
        rows.empty() || rows.front().IsNull(0) ? 0 : static_cast<size_t>(rows.front().Int(0));
    if (current > kPostgresMigrations.size()) {
      return Fail(Error::Internal(
          fmt::format("database schema version {} is newer than this binary knows ({}): run a "
                      "floatplane at least as new as the one that migrated the database",
                      current, kPostgresMigrations.size())));
    }
    for (size_t v = current; v < std::min(target, kPostgresMigrations.size()); ++v) {
      if (stopped()) break;
      const PgMigration& m = kPostgresMigrations[v];
      if (m.as_on_sqlite) {
        Result<std::string> sql = PostgresDialect(SqliteMigration(v + 1));
        if (!sql) return Fail(sql.error().WithContext(fmt::format("migration {}", v + 1)));
        FP_CHECK_OK(conn.Run(*sql));
      }
      if (!m.sql.empty()) FP_CHECK_OK(conn.Run(m.sql));
      FP_CHECK_OK(conn.Run(fmt::format("INSERT INTO schema_version (version) VALUES ({})", v + 1)));
    }
    if (stopped()) {
      cut = true;
      return Fail(Error::Unavailable("interrupted"));
    }
    return conn.Run("COMMIT");
  }();
  if (!migrated) (void)conn.Run("ROLLBACK");
  if (!migrated && stopped() && (cut || conn.cancelled_ever())) {
    interrupt->Honour();
    return Fail(Error::Unavailable(
        "interrupted while migrating the schema: none of this start's migrations was applied"));
  }
  return migrated;
}

}  // namespace fp::db
