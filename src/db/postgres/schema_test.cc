// The PostgreSQL schema against the test cluster (FLOATPLANE_TEST_POSTGRES; skipped without
// one): servers starting together migrate it once, a newer schema is refused, and a migration
// turns the rows of the version before it into what the next version expects.

#include "db/schema.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "common/testing/wait_for.h"
#include "db/nat.h"
#include "db/postgres/connection.h"
#include "db/testing/temp_datastore.h"

namespace fp::db::postgres {
namespace {

using fp::testing::WaitFor;
using testing::OnPostgres;
using testing::TempPostgresDatabase;

TEST(PgSchema, ServersStartingTogetherMigrateOnceAndANewerSchemaIsRefused) {
  if (!OnPostgres()) GTEST_SKIP() << "FLOATPLANE_TEST_POSTGRES is not set";
  TempPostgresDatabase db;
  std::vector<std::thread> threads;
  std::atomic<int> opened{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      auto ds = Datastore::OpenPostgres(db.url(), std::make_shared<SystemClock>(),
                                        std::make_shared<SystemRandom>());
      EXPECT_TRUE(ds) << ds.error().message();
      if (ds) ++opened;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(opened.load(), 4);
  auto conn = std::move(PgConnection::Open(db.url()).value());
  auto versions = conn->Query("SELECT version FROM schema_version ORDER BY version", {});
  ASSERT_TRUE(versions);
  const size_t latest = LatestSchemaVersion();
  ASSERT_EQ(versions->size(), latest);
  for (size_t i = 0; i < versions->size(); ++i) EXPECT_EQ((*versions)[i].Int(0), int64_t(i + 1));

  ASSERT_TRUE(
      conn->Run(fmt::format("INSERT INTO schema_version (version) VALUES ({})", latest + 1)));
  auto refused = Datastore::OpenPostgres(db.url(), std::make_shared<SystemClock>(),
                                         std::make_shared<SystemRandom>());
  ASSERT_FALSE(refused);
  EXPECT_NE(
      refused.error().message().find(fmt::format(
          "database schema version {} is newer than this binary knows ({})", latest + 1, latest)),
      std::string::npos)
      << refused.error().message();
}

// Migration 12 (quotas) on PostgreSQL: each live address names the project and silo it counts
// against (SQLite's twin: SchemaUpgradeTest in db/schema_test.cc).
TEST(PgSchema, Version11To12NamesTheProjectAndSiloEachLiveAddressCountsAgainst) {
  if (!OnPostgres()) GTEST_SKIP() << "FLOATPLANE_TEST_POSTGRES is not set";
  TempPostgresDatabase db;
  auto conn = std::move(PgConnection::Open(db.url()).value());
  ASSERT_TRUE(MigratePostgresSchemaTo(*conn, 11));
  ASSERT_TRUE(conn->Run(R"sql(
    INSERT INTO silo (id, name, description, discoverable, identity_mode, time_created,
                      time_modified)
      VALUES ('silo-1', 's1', '', 1, 'local_only', 1, 1);
    INSERT INTO project (id, silo_id, name, description, time_created, time_modified)
      VALUES ('proj-1', 'silo-1', 'p1', '', 1, 1);
    INSERT INTO ip_pool (id, name, description, ip_version, pool_type, assignment, time_created,
                         time_modified)
      VALUES ('pool-1', 'pool', '', 'v4', 'unicast', 'silos', 1, 1);
    INSERT INTO ip_pool_range (id, ip_pool_id, first_address, last_address, time_created,
                               time_modified)
      VALUES ('range-1', 'pool-1', '\x040a000000', '\x040a0000ff', 1, 1);
    INSERT INTO instance (id, project_id, name, description, hostname, ncpus, memory, state,
                          run_state, time_run_state_updated, time_created, time_modified)
      VALUES ('vm-1', 'proj-1', 'vm', '', 'vm', 1, 1073741824, 'no_vmm', 'stopped', 1, 1, 1);
    INSERT INTO external_ip (id, name, description, ip_pool_id, ip_pool_range_id, parent_id, kind,
                             ip, first_port, last_port, project_id, state, time_created,
                             time_modified, time_deleted)
      VALUES ('fip', 'www', '', 'pool-1', 'range-1', NULL, 'floating', '\x040a000001', 0, 65535,
              'proj-1', 'detached', 1, 1, NULL),
             ('snat', NULL, NULL, 'pool-1', 'range-1', 'vm-1', 'snat', '\x040a000002', 0, 16383,
              NULL, 'attached', 1, 1, NULL),
             ('eph', NULL, NULL, 'pool-1', 'range-1', 'vm-1', 'ephemeral', '\x040a000003', 0,
              65535, NULL, 'attached', 1, 1, NULL),
             ('gone', NULL, NULL, 'pool-1', 'range-1', 'vm-1', 'snat', '\x040a000004', 0, 16383,
              NULL, 'detached', 1, 1, 2);
  )sql"));
  ASSERT_TRUE(MigratePostgresSchemaTo(*conn, 12));
  auto count = [&](const std::string& sql) {
    auto rows = conn->Query(sql, {});
    EXPECT_TRUE(rows) << rows.error().message();
    return rows && !rows->empty() ? rows->front().Int(0) : -1;
  };
  EXPECT_EQ(count("SELECT count(*) FROM external_ip WHERE quota_project_id = 'proj-1' AND "
                  "quota_silo_id = 'silo-1'"),
            3);
  EXPECT_EQ(count("SELECT count(*) FROM external_ip WHERE id = 'gone' AND quota_project_id IS "
                  "NULL"),
            1);
  EXPECT_EQ(count("SELECT count(*) FROM silo WHERE ipv4_quota IS NULL AND cpus_quota = 0"), 1);
}

// Migration 18 (NAT versions from a sequence): the sequence starts after the counter's value,
// so the first version taken after the upgrade is above every version a switch has seen, and
// the current version is still the counter's while no row carries a higher one. A database
// that never took a version starts at 1.
TEST(PgSchema, Version17To18TakesNatVersionsAfterTheCounter) {
  if (!OnPostgres()) GTEST_SKIP() << "FLOATPLANE_TEST_POSTGRES is not set";
  for (const int64_t counter : {int64_t{41}, int64_t{0}}) {
    SCOPED_TRACE(counter > 0 ? "with a counter row" : "without one");
    TempPostgresDatabase db;
    {
      auto conn = std::move(PgConnection::Open(db.url()).value());
      ASSERT_TRUE(MigratePostgresSchemaTo(*conn, 17));
      if (counter > 0) {
        ASSERT_TRUE(conn->Run(
            fmt::format("INSERT INTO counter (name, value) VALUES ('nat_version', {})", counter)));
      }
      Status migrated = MigratePostgresSchemaTo(*conn, 18);
      ASSERT_TRUE(migrated) << migrated.error().message();
    }
    auto ds = Datastore::OpenPostgres(db.url(), std::make_shared<SystemClock>(),
                                      std::make_shared<SystemRandom>());
    ASSERT_TRUE(ds) << ds.error().message();
    EXPECT_EQ(NatCurrentVersion(**ds).value(), counter);
    for (int64_t k = 1; k <= 2; ++k) {
      auto next = (*ds)->Write<int64_t>([](Tx& tx) { return NatNextVersionIn(tx); });
      ASSERT_TRUE(next) << next.error().message();
      EXPECT_EQ(*next, counter + k);
    }
  }
}

TEST(PgSchema, NoServerIsUnavailable) {
  // A loopback port nothing listens on (the discard port).
  auto ds =
      Datastore::OpenPostgres("postgres://nobody@127.0.0.1:9/x?connect_timeout=2",
                              std::make_shared<SystemClock>(), std::make_shared<SystemRandom>());
  ASSERT_FALSE(ds);
  EXPECT_EQ(ds.error().kind(), ErrorKind::kServiceUnavailable);
}

// Interrupted (a signal at start, db::OpenInterrupt), the migration stops, here while it waits
// for the schema lock another server holds as it migrates: the wait is cancelled at once, and
// none of this start's migrations is applied. The next open migrates everything.
TEST(PgSchema, AnInterruptStopsAMigrationWaitingForTheLockAndLeavesNothingApplied) {
  if (!OnPostgres()) GTEST_SKIP() << "FLOATPLANE_TEST_POSTGRES is not set";
  TempPostgresDatabase db;
  auto other = std::move(PgConnection::Open(db.url()).value());
  ASSERT_TRUE(other->Run("BEGIN; SELECT pg_advisory_xact_lock(7236828283516204641)"));
  OpenInterrupt interrupt;
  std::atomic<bool> ended{false};
  std::atomic<bool> holder_ended{false};
  std::thread stopper([&] {
    // Once the migration waits for the lock, and again until it has ended.
    auto watcher = std::move(PgConnection::Open(db.url()).value());
    WaitFor(
        [&] {
          auto waiting = watcher->Query(
              "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND "
              "database = (SELECT oid FROM pg_database WHERE datname = current_database())",
              {});
          return ended.load() || (waiting && !waiting->empty() && waiting->front().Int(0) > 0);
        },
        std::chrono::seconds(20), std::chrono::milliseconds(10));
    const auto interrupted_and_ended = [&] {
      interrupt.Interrupt();
      return ended.load();
    };
    if (WaitFor(interrupted_and_ended, std::chrono::seconds(10), std::chrono::milliseconds(20))) {
      return;
    }
    // Not stopped within 10 s (a cancel that does nothing): the lock's holder is ended, so that
    // the migration runs to its end and the test fails instead of waiting forever.
    holder_ended = true;
    (void)watcher->Query("SELECT pg_terminate_backend(?::integer)", {other->backend_pid()});
    WaitFor(interrupted_and_ended, std::chrono::seconds(60), std::chrono::milliseconds(20));
  });
  auto opened = Datastore::OpenPostgres(db.url(), std::make_shared<SystemClock>(),
                                        std::make_shared<SystemRandom>(), {}, &interrupt);
  ended = true;
  stopper.join();
  ASSERT_FALSE(holder_ended.load()) << "the cancel did not stop the wait for the lock";
  ASSERT_FALSE(opened) << "the migration was not stopped";
  EXPECT_EQ(opened.error().kind(), ErrorKind::kServiceUnavailable);
  EXPECT_EQ(opened.error().message(),
            "interrupted while migrating the schema: none of this start's migrations was "
            "applied");
  EXPECT_TRUE(interrupt.honoured());
  ASSERT_TRUE(other->Run("ROLLBACK"));
  auto tables = other->Query(
      "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename = 'schema_version'",
      {});
  ASSERT_TRUE(tables);
  EXPECT_EQ(tables->front().Int(0), 0) << "nothing of the migrations is left";
  auto ds = Datastore::OpenPostgres(db.url(), std::make_shared<SystemClock>(),
                                    std::make_shared<SystemRandom>());
  ASSERT_TRUE(ds) << ds.error().message();
  auto version = other->Query("SELECT max(version) FROM schema_version", {});
  ASSERT_TRUE(version);
  EXPECT_EQ(version->front().Int(0), static_cast<int64_t>(kSchemaVersion));
}

}  // namespace
}  // namespace fp::db::postgres
