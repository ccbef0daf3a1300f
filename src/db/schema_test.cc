// Schema upgrades keep every row: a database built at an older schema version, holding sagas
// with their events and NAT entries live and removed, is migrated to the newest schema.

#include "db/schema.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "db/datastore.h"

namespace fp::db {
namespace {

// A migration is written once, for SQLite; PostgreSQL runs it in its own dialect.
TEST(PostgresDialect, TranslatesTypesAndTableOptionsAndLeavesLiteralsAndCommentsAlone) {
  EXPECT_EQ(PostgresDialect(R"(-- an INTEGER in a comment stays
CREATE TABLE t (
  id TEXT NOT NULL PRIMARY KEY,
  n INTEGER NOT NULL DEFAULT 0, /* a BLOB here stays */
  key BLOB,
  kind TEXT CHECK (kind IN ('TEXT', 'INTEGER')),
  "INTEGER" TEXT
) STRICT, WITHOUT ROWID;
CREATE TABLE u (v INTEGER) STRICT;
ALTER TABLE t ADD COLUMN w TEXT;)")
                .value(),
            R"(-- an INTEGER in a comment stays
CREATE TABLE t (
  id TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  n BIGINT NOT NULL DEFAULT 0, /* a BLOB here stays */
  key BYTEA,
  kind TEXT COLLATE "C" CHECK (kind IN ('TEXT', 'INTEGER')),
  "INTEGER" TEXT COLLATE "C"
);
CREATE TABLE u (v BIGINT);
ALTER TABLE t ADD COLUMN w TEXT COLLATE "C";)");
}

// What would not mean the same on PostgreSQL is refused, naming it, rather than translated.
TEST(PostgresDialect, RefusesWhatItCannotTranslateFaithfully) {
  for (const char* sql :
       {"CREATE TABLE t (a integer)", "CREATE TABLE t (a TEXT COLLATE NOCASE)",
        "CREATE TABLE t (a INTEGER PRIMARY KEY, b TEXT)",
        "CREATE TABLE t (a INTEGER) WITHOUT ROWID", "SELECT rowid FROM t",
        "SELECT CAST(a AS TEXT) FROM t", "CREATE TABLE t (a INTEGER PRIMARY KEY AUTOINCREMENT)"}) {
    auto translated = PostgresDialect(sql);
    ASSERT_FALSE(translated) << sql << " became " << *translated;
    EXPECT_NE(translated.error().message().find("cannot be translated"), std::string::npos);
  }
}

// Every SQLite migration translates, free of SQLite's own words.
TEST(PostgresDialect, EveryMigrationTranslatesWithoutASqliteOnlyWord) {
  for (size_t v = 1; v <= kSchemaVersion; ++v) {
    auto translated = PostgresDialect(SqliteMigration(v));
    if (v == 4) {
      // Its own on PostgreSQL (Own): SQLite rebuilds nat_entry on an INTEGER PRIMARY KEY.
      EXPECT_FALSE(translated);
      continue;
    }
    ASSERT_TRUE(translated) << "migration " << v << ": " << translated.error().message();
    std::string code;  // without comments
    for (size_t i = 0; i < translated->size();) {
      size_t dash = translated->find("--", i);
      code += translated->substr(i, dash - i);
      if (dash == std::string::npos) break;
      i = translated->find('\n', dash);
    }
    for (const char* word : {"STRICT", "ROWID", " INTEGER", " BLOB"}) {
      EXPECT_EQ(code.find(word), std::string::npos) << "migration " << v << ": " << word;
    }
  }
}

// A silo and a project in it, for the migrations' tests that need rows owned by a project.
constexpr const char* kSiloAndProject = R"sql(
    INSERT INTO silo (id, name, description, discoverable, identity_mode, time_created,
                      time_modified)
      VALUES ('silo-1', 's1', '', 1, 'local_only', 1, 1);
    INSERT INTO project (id, silo_id, name, description, time_created, time_modified)
      VALUES ('proj-1', 'silo-1', 'p1', '', 1, 1);
)sql";

class SchemaUpgradeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/floatplane-schema-XXXXXX";
    dir_ = mkdtemp(tmpl);
    auto conn = sqlite::SqliteConnection::Open(dir_ + "/floatplane.db");
    ASSERT_TRUE(conn) << conn.error().message();
    conn_ = std::move(*conn);
  }
  void TearDown() override {
    conn_.reset();
    std::filesystem::remove_all(dir_);
  }

  int64_t Count(const std::string& sql) {
    auto rows = conn_->Query(sql, {});
    EXPECT_TRUE(rows) << rows.error().message();
    return rows && !rows->empty() ? rows->front().Int(0) : -1;
  }

  // The file passes SQLite's own check: every index holds exactly its table's rows.
  void ExpectSound() {
    auto check = conn_->Query("PRAGMA integrity_check", {});
    ASSERT_TRUE(check) << check.error().message();
    EXPECT_EQ(check->front().Text(0), "ok");
  }

  std::string dir_;
  std::unique_ptr<sqlite::SqliteConnection> conn_;
};

TEST_F(SchemaUpgradeTest, Version3To4KeepsSagasEventsAndNatRows) {
  ASSERT_TRUE(MigrateSchemaTo(*conn_, 3));
  ASSERT_TRUE(conn_->ExecScript(R"sql(
    INSERT INTO saga (id, name, dag, state, current_sec, adopt_generation, engine_version,
                      result, time_created, time_modified)
      VALUES ('s-done', 'ip_attach', '{}', 'done', 'sec-a', 1, 1, '{"ok":1}', 1, 2),
             ('s-running', 'ip_detach', '{}', 'running', 'sec-a', 2, 1, NULL, 3, 4);
    INSERT INTO saga_node_event (saga_id, node_index, event_type, data, time_created)
      VALUES ('s-done', 0, 'succeeded', '{}', 1), ('s-running', 0, 'succeeded', '{}', 3);
    INSERT INTO nat_entry (id, external_ip, first_port, last_port, sled_address, vni, mac,
                           instance_id, version_added, version_removed, time_created,
                           time_deleted)
      VALUES ('n1', x'040a000001', 0, 65535, x'06fd00', 10, 'a8:40:25:00:00:01', 'i1', 1, 3, 1, 2),
             ('n2', x'040a000002', 0, 65535, x'06fd00', 10, 'a8:40:25:00:00:02', 'i1', 2, NULL, 1,
              NULL),
             ('n3', x'040a000001', 0, 65535, x'06fd01', 11, 'a8:40:25:00:00:03', 'i2', 4, NULL, 5,
              NULL);
  )sql"));

  ASSERT_TRUE(MigrateSchemaTo(*conn_, 4));

  EXPECT_EQ(Count("SELECT max(version) FROM schema_version"), 4);
  EXPECT_EQ(Count("SELECT count(*) FROM saga"), 2);
  EXPECT_EQ(Count("SELECT adopt_generation FROM saga WHERE id = 's-running'"), 2);
  EXPECT_EQ(Count("SELECT count(*) FROM saga_node_event"), 2);
  EXPECT_EQ(Count("SELECT count(*) FROM pragma_foreign_key_check"), 0);
  // The recovery query still finds the unfinished saga through its index.
  EXPECT_EQ(Count("SELECT count(*) FROM saga WHERE current_sec = 'sec-a' AND "
                  "state IN ('running', 'unwinding')"),
            1);
  EXPECT_EQ(Count("SELECT count(*) FROM nat_entry"), 3);
  EXPECT_EQ(Count("SELECT count(*) FROM nat_entry WHERE version_removed IS NULL"), 2);
  EXPECT_EQ(Count("SELECT version_removed FROM nat_entry WHERE id = 'n1'"), 3);
  EXPECT_EQ(Count("SELECT vni FROM nat_entry WHERE version_added = 4"), 11);

  // The constraints survive the rebuild: one live entry per address and port range, one id
  // per entry, one change per version; any number of live entries have no removal version.
  EXPECT_FALSE(conn_->ExecScript(
      "INSERT INTO nat_entry (id, external_ip, first_port, last_port, sled_address, vni, mac, "
      "instance_id, version_added, time_created) VALUES ('n4', x'040a000002', 0, 65535, "
      "x'06fd00', 10, 'm', 'i3', 5, 6)"));
  EXPECT_FALSE(conn_->ExecScript(
      "INSERT INTO nat_entry (id, external_ip, first_port, last_port, sled_address, vni, mac, "
      "instance_id, version_added, time_created) VALUES ('n1', x'040a000009', 0, 65535, "
      "x'06fd00', 10, 'm', 'i3', 5, 6)"));
  EXPECT_FALSE(conn_->ExecScript("UPDATE nat_entry SET version_removed = 3 WHERE id = 'n2'"));
  EXPECT_TRUE(conn_->ExecScript(
      "INSERT INTO nat_entry (id, external_ip, first_port, last_port, sled_address, vni, mac, "
      "instance_id, version_added, time_created) VALUES ('n5', x'040a000009', 0, 65535, "
      "x'06fd00', 10, 'm', 'i3', 5, 6)"));
  EXPECT_EQ(Count("SELECT count(*) FROM nat_entry WHERE version_removed IS NULL"), 3);
  // Foreign keys are back on after the migration: an event needs its saga.
  EXPECT_FALSE(conn_->ExecScript(
      "INSERT INTO saga_node_event (saga_id, node_index, event_type, time_created) "
      "VALUES ('no-such-saga', 0, 'started', 1)"));
}

TEST_F(SchemaUpgradeTest, Version4To5KeepsAnswersAndDropsPendingClaims) {
  ASSERT_TRUE(MigrateSchemaTo(*conn_, 4));
  ASSERT_TRUE(conn_->ExecScript(R"sql(
    INSERT INTO idempotency_key (token_id, key, request_sha256, state, status, body,
                                 time_created)
      VALUES ('t', 'answered', 'h1', 'done', 201, '{"id":"x"}', 7),
             ('t', 'claimed', 'h2', 'pending', NULL, NULL, 8);
  )sql"));

  ASSERT_TRUE(MigrateSchemaTo(*conn_, 5));

  EXPECT_EQ(Count("SELECT max(version) FROM schema_version"), 5);
  EXPECT_EQ(Count("SELECT count(*) FROM idempotency_key"), 1);
  EXPECT_EQ(Count("SELECT status FROM idempotency_key WHERE key = 'answered'"), 201);
  EXPECT_EQ(Count("SELECT time_created FROM idempotency_key WHERE key = 'answered'"), 7);
  // A record names its saga exactly when it is a saga's.
  EXPECT_FALSE(conn_->ExecScript(
      "INSERT INTO idempotency_key (token_id, key, request_sha256, state, time_created) "
      "VALUES ('t', 'k', 'h', 'saga', 1)"));
  EXPECT_TRUE(conn_->ExecScript(
      "INSERT INTO idempotency_key (token_id, key, request_sha256, state, saga_id, "
      "time_created) VALUES ('t', 'k', 'h', 'saga', 's', 1)"));
}

// Migration 6 (bounded history) starts the saga row counter at the rows already there, and
// the triggers keep it right afterwards.
TEST_F(SchemaUpgradeTest, Version5To6CountsTheSagasAlreadyThere) {
  ASSERT_TRUE(MigrateSchemaTo(*conn_, 5));
  ASSERT_TRUE(conn_->ExecScript(R"sql(
    INSERT INTO saga (id, name, dag, state, current_sec, adopt_generation, engine_version,
                      result, time_created, time_modified)
      VALUES ('s-done', 'ip_attach', '{}', 'done', 'sec-a', 1, 1, '{"ok":1}', 1, 2),
             ('s-stuck', 'ip_attach', '{}', 'stuck', 'sec-a', 1, 1, '{}', 1, 2),
             ('s-running', 'ip_detach', '{}', 'running', 'sec-a', 2, 1, NULL, 3, 4);
  )sql"));
  ASSERT_TRUE(MigrateSchemaTo(*conn_, 6));
  EXPECT_EQ(Count("SELECT max(version) FROM schema_version"), 6);
  EXPECT_EQ(Count("SELECT value FROM counter WHERE name = 'saga_rows'"), 3);
  ASSERT_TRUE(conn_->ExecScript("DELETE FROM saga WHERE id = 's-done'"));
  EXPECT_EQ(Count("SELECT value FROM counter WHERE name = 'saga_rows'"), 2);
  // The finished-saga index holds only sagas at rest as done or unwound.
  EXPECT_EQ(Count("SELECT count(*) FROM saga INDEXED BY saga_finished WHERE state IN ('done', "
                  "'unwound') AND time_modified > 0"),
            0);
  ASSERT_TRUE(conn_->ExecScript("UPDATE saga SET state = 'done' WHERE id = 's-running'"));
  EXPECT_EQ(Count("SELECT count(*) FROM saga INDEXED BY saga_finished WHERE state IN ('done', "
                  "'unwound') AND time_modified > 0"),
            1);
}

// Migration 15 puts saga back in a rowid table: every row, its node events (whose foreign key
// names it) and the row counter stay, the indexes and triggers come back, and a row the size
// of an attach's (about 1.2 KB) stays in its b-tree page instead of an overflow page of its own.
TEST_F(SchemaUpgradeTest, Version14To15KeepsSagasAndTheirRowsFitTheirPages) {
  ASSERT_TRUE(MigrateSchemaTo(*conn_, 14));
  const std::string big(1200, 'x');
  auto insert_sagas = [&](int from, int to) {
    for (int n = from; n < to; ++n) {
      ASSERT_TRUE(conn_->ExecScript(fmt::format(
          "INSERT INTO saga (id, name, dag, state, current_sec, adopt_generation, "
          "engine_version, result, time_created, time_modified, origin) VALUES ('s-{:03}', "
          "'ip_attach', '{}', '{}', 'sec-a', 1, 1, NULL, {}, {}, '{{}}')",
          n, big, n % 3 == 0 ? "running" : "done", n, n)));
    }
  };
  insert_sagas(0, 60);
  ASSERT_TRUE(conn_->ExecScript(
      "INSERT INTO saga_node_event (saga_id, node_index, event_type, data, time_created) "
      "VALUES ('s-003', 0, 'started', '{}', 3)"));
  auto overflow = [&] {
    return Count("SELECT count(*) FROM dbstat WHERE name = 'saga' AND pagetype = 'overflow'");
  };
  ASSERT_GT(overflow(), 50) << "the old table spills each such row";
  ASSERT_TRUE(MigrateSchemaTo(*conn_, 15));
  EXPECT_EQ(Count("SELECT count(*) FROM saga"), 60);
  EXPECT_EQ(Count("SELECT value FROM counter WHERE name = 'saga_rows'"), 60);
  EXPECT_EQ(Count("SELECT count(*) FROM saga_node_event WHERE saga_id = 's-003'"), 1);
  EXPECT_EQ(Count("SELECT count(*) FROM saga INDEXED BY saga_unfinished WHERE current_sec = "
                  "'sec-a' AND state IN ('running', 'unwinding')"),
            20);
  insert_sagas(60, 120);
  EXPECT_EQ(overflow(), 0);
  EXPECT_EQ(Count("SELECT value FROM counter WHERE name = 'saga_rows'"), 120);
  ASSERT_TRUE(conn_->ExecScript("DELETE FROM saga WHERE id = 's-100'"));
  EXPECT_EQ(Count("SELECT value FROM counter WHERE name = 'saga_rows'"), 119);
  EXPECT_FALSE(conn_->ExecScript(
      "INSERT INTO saga (id, name, dag, state, current_sec, adopt_generation, engine_version, "
      "time_created, time_modified) VALUES ('s-001', 'x', '{}', 'done', 'sec-a', 1, 1, 1, 1)"))
      << "the id stays unique";
}

// Migration 16 writes the IN lists of CHECKs and of saga_by_state's condition as ORs: the
// statements an attach and a detach run build no temporary b-tree, and the same rows are
// accepted, refused and indexed as before.
TEST_F(SchemaUpgradeTest, Version15To16WritesWithoutTemporaryTreesAndChecksTheSame) {
  ASSERT_TRUE(MigrateSchemaTo(*conn_, 15));
  auto insert_saga = [&](const std::string& id, const std::string& state) {
    return conn_->ExecScript(fmt::format(
        "INSERT INTO saga (id, name, dag, state, current_sec, adopt_generation, engine_version, "
        "time_created, time_modified) VALUES ('{}', 'ip_attach', '{{}}', '{}', 'sec-a', 1, 1, 1, "
        "1)",
        id, state));
  };
  ASSERT_TRUE(insert_saga("s-stuck", "stuck"));
  ASSERT_TRUE(insert_saga("s-done", "done"));
  ASSERT_TRUE(MigrateSchemaTo(*conn_, 16));
  // Each statement's program, as SQLite compiles it: no OpenEphemeral (a temporary b-tree).
  const std::vector<std::string> writes = {
      "UPDATE external_ip SET state = 'detaching', op_saga_id = 'x', time_modified = 1 "
      "WHERE id = 'y'",
      "INSERT INTO external_ip (id, ip_pool_id, ip_pool_range_id, parent_id, kind, ip, "
      "first_port, last_port, state, time_created, time_modified) VALUES ('e', 'p', 'r', 'i', "
      "'snat', x'04', 0, 1, 'attached', 1, 1)",
      "INSERT INTO saga (id, name, dag, state, current_sec, adopt_generation, engine_version, "
      "time_created, time_modified) VALUES ('s', 'n', '{}', 'running', 'a', 1, 1, 1, 1)",
      "UPDATE saga SET state = 'done', result = 'r', time_modified = 1 WHERE id = 'x'",
      "INSERT INTO saga_node_event (saga_id, node_index, event_type, data, time_created) "
      "VALUES ('s', 1, 'started', '', 1)",
      "UPDATE instance SET state = 'vmm', time_modified = 1 WHERE id = 'x'",
      "INSERT INTO audit_log (id, time_started, request_id, request_uri, operation_id, "
      "source_ip, success_status, result_kind) VALUES ('a', 1, 'r', '/', 'o', 'ip', 200, "
      "'success')",
  };
  for (const std::string& sql : writes) {
    auto program = conn_->Query("EXPLAIN " + sql, {});
    ASSERT_TRUE(program) << program.error().message();
    for (const Row& op : *program) EXPECT_NE(op.Text(1), "OpenEphemeral") << sql;
  }
  // The same values refused.
  EXPECT_FALSE(insert_saga("s-bad", "finished"));
  EXPECT_FALSE(conn_->ExecScript(
      "INSERT INTO saga_node_event (saga_id, node_index, event_type, data, time_created) "
      "VALUES ('s-done', 1, 'begun', '', 1)"));
  EXPECT_TRUE(conn_->ExecScript(
      "INSERT INTO saga_node_event (saga_id, node_index, event_type, data, time_created) "
      "VALUES ('s-done', 1, 'undo_failed', '', 1)"));
  EXPECT_FALSE(conn_->ExecScript(
      "INSERT INTO audit_log (id, time_started, request_id, request_uri, operation_id, "
      "source_ip, success_status, result_kind) VALUES ('a', 1, 'r', '/', 'o', 'ip', 200, "
      "'fine')"));
  // The index holds the same rows: the stuck saga from before, a running one after, no other.
  ASSERT_TRUE(insert_saga("s-running", "running"));
  EXPECT_EQ(Count("SELECT count(*) FROM saga INDEXED BY saga_by_state WHERE state = 'stuck'"), 1);
  EXPECT_EQ(Count("SELECT count(*) FROM saga INDEXED BY saga_by_state WHERE state = 'running'"), 1);
  // And a connection opened afterwards reads the same definitions; the file is sound.
  conn_.reset();
  conn_ = std::move(*sqlite::SqliteConnection::Open(dir_ + "/floatplane.db"));
  EXPECT_EQ(Count("SELECT count(*) FROM sqlite_schema WHERE sql LIKE '% IN (''running'', "
                  "''unwinding'', ''stuck'')%' OR sql LIKE '%state IN (''detached''%'"),
            0);
  EXPECT_FALSE(insert_saga("s-bad", "finished"));
  ExpectSound();
}

// Migration 17 keys instance_by_sled by sled and state (the placement's count reads the index
// alone): the index holds the same live instances, now with their states.
TEST_F(SchemaUpgradeTest, Version16To17KeysInstancesBySledAndThenState) {
  ASSERT_TRUE(MigrateSchemaTo(*conn_, 16));
  ASSERT_TRUE(conn_->ExecScript(kSiloAndProject));
  ASSERT_TRUE(conn_->ExecScript(R"sql(
    INSERT INTO sled (id, serial, agent_url, underlay_address, time_created, time_modified)
      VALUES ('s-1', 'BRM1', 'http://a', x'00', 1, 1), ('s-2', 'BRM2', 'http://b', x'00', 1, 1);
    INSERT INTO instance (id, project_id, name, description, hostname, ncpus, memory, state,
                          run_state, sled_id, time_run_state_updated, time_created,
                          time_modified, time_deleted)
      VALUES ('i-1', 'proj-1', 'a', '', 'h', 1, 1, 'vmm', 'running', 's-1', 1, 1, 1, NULL),
             ('i-2', 'proj-1', 'b', '', 'h', 1, 1, 'vmm', 'running', 's-1', 1, 1, 1, NULL),
             ('i-3', 'proj-1', 'c', '', 'h', 1, 1, 'failed', 'failed', 's-1', 1, 1, 1, NULL),
             ('i-4', 'proj-1', 'd', '', 'h', 1, 1, 'vmm', 'running', 's-2', 1, 1, 1, 5),
             ('i-5', 'proj-1', 'e', '', 'h', 1, 1, 'no_vmm', 'stopped', NULL, 1, 1, 1, NULL);
  )sql"));
  Status migrated = MigrateSchemaTo(*conn_, 17);
  ASSERT_TRUE(migrated) << migrated.error().message();
  EXPECT_EQ(Count("SELECT count(*) FROM pragma_index_info('instance_by_sled') WHERE "
                  "(seqno = 0 AND name = 'sled_id') OR (seqno = 1 AND name = 'state')"),
            2);
  EXPECT_EQ(Count("SELECT count(*) FROM pragma_index_info('instance_by_sled')"), 2);
  EXPECT_EQ(Count("SELECT count(*) FROM instance INDEXED BY instance_by_sled WHERE sled_id = "
                  "'s-1' AND state = 'vmm' AND time_deleted IS NULL"),
            2);
  EXPECT_EQ(Count("SELECT count(*) FROM instance INDEXED BY instance_by_sled WHERE sled_id = "
                  "'s-1' AND time_deleted IS NULL"),
            3);
  ExpectSound();
}

// Migration 12 (quotas) names, on every live external IP, the project and silo its address
// counts against: a floating IP's own project, an SNAT or ephemeral IP's instance's project.
TEST_F(SchemaUpgradeTest, Version11To12NamesTheProjectAndSiloEachLiveAddressCountsAgainst) {
  ASSERT_TRUE(MigrateSchemaTo(*conn_, 11));
  ASSERT_TRUE(conn_->ExecScript(kSiloAndProject));
  ASSERT_TRUE(conn_->ExecScript(R"sql(
    INSERT INTO ip_pool (id, name, description, ip_version, pool_type, assignment, time_created,
                         time_modified)
      VALUES ('pool-1', 'pool', '', 'v4', 'unicast', 'silos', 1, 1);
    INSERT INTO ip_pool_range (id, ip_pool_id, first_address, last_address, time_created,
                               time_modified)
      VALUES ('range-1', 'pool-1', x'040a000000', x'040a0000ff', 1, 1);
    INSERT INTO instance (id, project_id, name, description, hostname, ncpus, memory, state,
                          run_state, time_run_state_updated, time_created, time_modified)
      VALUES ('vm-1', 'proj-1', 'vm', '', 'vm', 1, 1073741824, 'no_vmm', 'stopped', 1, 1, 1);
    INSERT INTO external_ip (id, name, description, ip_pool_id, ip_pool_range_id, parent_id, kind,
                             ip, first_port, last_port, project_id, state, time_created,
                             time_modified, time_deleted)
      VALUES ('fip', 'www', '', 'pool-1', 'range-1', NULL, 'floating', x'040a000001', 0, 65535,
              'proj-1', 'detached', 1, 1, NULL),
             ('snat', NULL, NULL, 'pool-1', 'range-1', 'vm-1', 'snat', x'040a000002', 0, 16383,
              NULL, 'attached', 1, 1, NULL),
             ('eph', NULL, NULL, 'pool-1', 'range-1', 'vm-1', 'ephemeral', x'040a000003', 0,
              65535, NULL, 'attached', 1, 1, NULL),
             ('gone', NULL, NULL, 'pool-1', 'range-1', 'vm-1', 'snat', x'040a000004', 0, 16383,
              NULL, 'detached', 1, 1, 2);
  )sql"));
  ASSERT_TRUE(MigrateSchemaTo(*conn_, 12));
  EXPECT_EQ(Count("SELECT max(version) FROM schema_version"), 12);
  EXPECT_EQ(Count("SELECT count(*) FROM external_ip WHERE quota_project_id = 'proj-1' AND "
                  "quota_silo_id = 'silo-1'"),
            3);
  EXPECT_EQ(Count("SELECT count(*) FROM external_ip WHERE id = 'gone' AND quota_project_id IS "
                  "NULL"),
            1)
      << "a released address counts against nothing";
  // No limits on existing silos and projects; Oxide's recorded quotas read 0.
  EXPECT_EQ(Count("SELECT count(*) FROM silo WHERE ipv4_quota IS NULL AND ipv6_quota IS NULL AND "
                  "cpus_quota = 0"),
            1);
  EXPECT_EQ(Count("SELECT count(*) FROM project WHERE ipv4_quota IS NULL"), 1);
}

// A migration interrupted (a signal at start, db::OpenInterrupt) is rolled back and the
// migrations after it do not begin; those before it stay, and the next open finishes the work.
// The interrupt here comes before the first migration: its statement-level cancel is
// ExecScriptTest.InterruptFromAnotherThreadStopsTheStatementRunning.
TEST_F(SchemaUpgradeTest, AnInterruptedMigrationStopsAndTheNextOpenFinishesIt) {
  ASSERT_TRUE(MigrateSchemaTo(*conn_, 14));
  OpenInterrupt interrupt;
  interrupt.Interrupt();
  Status migrated = MigrateSchema(*conn_, &interrupt);
  ASSERT_FALSE(migrated);
  EXPECT_EQ(migrated.error().kind(), ErrorKind::kServiceUnavailable);
  EXPECT_EQ(migrated.error().message(),
            "interrupted while migrating the schema to version 15: that migration was rolled "
            "back");
  EXPECT_TRUE(interrupt.honoured());
  EXPECT_EQ(Count("SELECT max(version) FROM schema_version"), 14);
  EXPECT_EQ(Count("PRAGMA foreign_keys"), 1) << "the connection's setting restored";
  conn_.reset();
  auto reopened = Datastore::OpenSqlite(dir_ + "/floatplane.db", std::make_shared<SystemClock>(),
                                        std::make_shared<SystemRandom>());
  ASSERT_TRUE(reopened) << reopened.error().message();
  reopened->reset();
  conn_ = std::move(sqlite::SqliteConnection::Open(dir_ + "/floatplane.db").value());
  EXPECT_EQ(Count("SELECT max(version) FROM schema_version"), static_cast<int64_t>(kSchemaVersion));
}

}  // namespace
}  // namespace fp::db
