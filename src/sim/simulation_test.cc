#include "sim/simulation.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "db/schema.h"
#include "db/sqlite/connection.h"
#include "db/testing/statement_trace.h"
#include "db/testing/temp_datastore.h"

namespace fp::sim {
namespace {

std::string Describe(const RunReport& r, const RunOptions& o) {
  std::string s = "replay: " + ReplayCommand(o) + " --trace\n";
  for (const auto& v : r.violations) s += "  " + v + "\n";
  return s;
}

TEST(Simulation, TheSameSeedGivesTheSameRunAndAnotherSeedAnother) {
  RunOptions o{.seed = 7, .operations = 40};
  RunReport a = sim::Run(o);
  RunReport b = sim::Run(o);
  EXPECT_EQ(a.trace_hash, b.trace_hash);
  EXPECT_EQ(a.trace, b.trace);
  o.seed = 8;
  RunReport c = sim::Run(o);
  EXPECT_NE(c.trace_hash, a.trace_hash);
  // Runs share nothing, so two at once on two threads (floatplane-sim --jobs) are the same runs.
  RunReport a_beside;
  std::thread beside([&] { a_beside = sim::Run({.seed = 7, .operations = 40}); });
  RunReport c_beside = sim::Run(o);
  beside.join();
  EXPECT_EQ(a_beside.trace, a.trace);
  EXPECT_EQ(c_beside.trace, c.trace);
}

// Seeds in CI: FLOATPLANE_SIM_SEEDS (default 80) runs of 60 steps with every fault.
TEST(Simulation, EverySeedKeepsTheInvariants) {
  int seeds = 80;
  if (const char* n = std::getenv("FLOATPLANE_SIM_SEEDS")) seeds = std::atoi(n);
  int crashes = 0;
  int restarts = 0;
  int64_t slow_syncs = 0;
  for (int s = 1; s <= seeds; ++s) {
    RunOptions o{.seed = static_cast<uint64_t>(s)};
    RunReport r = sim::Run(o);
    crashes += r.server_crashes;
    restarts += r.agent_restarts;
    slow_syncs += r.slow_syncs;
    EXPECT_TRUE(r.violations.empty()) << "seed " << s << "\n" << Describe(r, o);
  }
  // The faults really happen.
  EXPECT_GT(crashes, 0);
  EXPECT_GT(restarts, 0);
  EXPECT_GT(slow_syncs, 0);
}

// Three servers on the one database (FLOATPLANE_SIM_SERVER_SEEDS, default 20): operations go
// to any running server, servers stop and start again, and at the end the stopped ones stay
// stopped, so every saga they left unfinished must have been adopted and finished by another
// (without adoption, db::SagaAdoptExpired adopting nothing, 50 of 300 seeds failed so). A run
// that adopted repeats too.
TEST(Simulation, SeveralServersKeepTheInvariantsAndAdoptWhatAStoppedOneLeft) {
  int seeds = 20;
  if (const char* n = std::getenv("FLOATPLANE_SIM_SERVER_SEEDS")) seeds = std::atoi(n);
  int64_t adopted = 0;
  int crashes = 0;
  std::optional<RunOptions> adopting;
  std::vector<std::string> adopting_trace;
  for (int s = 1; s <= seeds; ++s) {
    RunOptions o{.seed = static_cast<uint64_t>(s), .shape = {.servers = 3}};
    RunReport r = sim::Run(o);
    adopted += r.adopted;
    crashes += r.server_crashes;
    EXPECT_TRUE(r.violations.empty()) << "seed " << s << "\n" << Describe(r, o);
    if (r.adopted > 0 && !adopting) {
      adopting = o;
      adopting_trace = r.trace;
    }
  }
  EXPECT_GT(adopted, 0);
  EXPECT_GT(crashes, 0);
  ASSERT_TRUE(adopting.has_value());
  EXPECT_EQ(sim::Run(*adopting).trace, adopting_trace)
      << "seed " << adopting->seed << " ran differently twice";
}

// One implementation of each rule (issue 27): PostgreSQL runs some of the datastore's decisions
// as its own statements (attach and detach as one statement each, allocation and release in
// PL/pgSQL). The same seeds on both engines must give the same runs: every answer of every
// step, and every row the final state lists. FLOATPLANE_SIM_PG_SEEDS runs (default 10), the
// even seeds with three servers (leases and adoption, where several servers really run); run by
// pg.sim_test on scripts/test's throwaway cluster, skipped without one.
TEST(Simulation, PostgreSqlAnswersEveryStepAsSqliteDoes) {
  if (!db::testing::OnPostgres()) GTEST_SKIP() << "FLOATPLANE_TEST_POSTGRES is not set";
  int seeds = 10;
  if (const char* n = std::getenv("FLOATPLANE_SIM_PG_SEEDS")) seeds = std::atoi(n);
  for (int s = 1; s <= seeds; ++s) {
    RunOptions o{.seed = static_cast<uint64_t>(s), .log_sync_faults = false};
    o.shape.servers = s % 2 == 0 ? 3 : 1;
    RunReport lite = sim::Run(o);
    db::testing::TempPostgresDatabase pg;
    o.postgres_url = pg.url();
    RunReport post = sim::Run(o);
    EXPECT_TRUE(post.violations.empty()) << "seed " << s << " on PostgreSQL\n" << Describe(post, o);
    EXPECT_EQ(lite.trace_hash, post.trace_hash)
        << "seed " << s << ": SQLite and PostgreSQL diverge at " << lite.FirstDifference(post);
  }
}

// SQLite builds a temporary b-tree (OpenEphemeral in a statement's program) for an IN list of
// three values or more, a CHECK or partial index written with one, RETURNING, an UPDATE of the
// index its WHERE searches, and a join of materialised subqueries: at every run of the
// statement, a few percent of a busy server's CPU (schema 16 and the SQLite-only statement
// shapes of counters.cc, audit_log.cc, attach.cc and instances.cc took them out). Every
// statement a run of the whole control plane executes is compiled again here and read for one,
// but for three reads that sort, off the attach and detach path: the check's own saga list, a
// page of who holds a pool's addresses, and the sagas of servers whose leases ran out, looked
// for at every adoption pass of every server (the few unfinished sagas sorted, the live
// servers' ids as its NOT IN list). Nor may a
// statement build an automatic index (OpenAutoindex): SQLite makes one by reading a whole table
// when no index serves a join, at every run, so its cost grows with the table. (Sorts with SQLite's
// sorter, SorterOpen, are not looked for: small sorted reads use them, an instance's addresses and
// a sled's instances.)
TEST(Simulation, NoStatementOfTheControlPlaneBuildsATemporaryTreeOrIndex) {
  const std::vector<std::string> allowed = {
      "SELECT id, name, state FROM saga ORDER BY time_created DESC",
      "SELECT e.id, e.ip, e.kind, e.first_port, e.last_port, e.ip_pool_range_id, e.name,",
      "SELECT id, current_sec, adopt_generation FROM saga WHERE state IN ('running', "
      "'unwinding') AND current_sec <> ? AND current_sec NOT IN (SELECT sec_id FROM sec_lease "
      "WHERE expires_at >= ?) ORDER BY time_created, id LIMIT ?",
  };
  db::testing::TempSqliteDatastore scratch;  // for its directory
  // Migrated before the trace: the migrations' copies of tables are not the workload.
  auto migrate = [&](const std::string& dir) {
    std::filesystem::create_directories(dir);
    auto conn = db::sqlite::SqliteConnection::Open(dir + "/floatplane.db");
    ASSERT_TRUE(conn) << conn.error().message();
    ASSERT_TRUE(db::MigrateSchema(**conn));
  };
  const std::string dir = scratch.dir() + "/run";
  ASSERT_NO_FATAL_FAILURE(migrate(dir));
  // And a run of three servers with faults whose servers crash, stop and adopt each other's
  // sagas (seed 1 adopts one): leases, their renewals and the adoption's statements.
  const RunOptions several{.seed = 1, .shape = {.servers = 3}, .dir = scratch.dir() + "/servers"};
  ASSERT_NO_FATAL_FAILURE(migrate(several.dir));
  std::set<std::string> texts;
  {
    db::testing::StatementTrace trace;
    RunReport r = sim::Run({.seed = 3, .faults = false, .dir = dir});
    EXPECT_TRUE(r.violations.empty()) << Describe(r, {.seed = 3, .faults = false});
    RunReport s = sim::Run(several);
    EXPECT_TRUE(s.violations.empty()) << Describe(s, several);
    EXPECT_GT(s.adopted, 0) << "seed 1 of three servers no longer adopts: choose another";
    texts = trace.texts();
  }
  auto conn = db::sqlite::SqliteConnection::Open(dir + "/floatplane.db");
  ASSERT_TRUE(conn) << conn.error().message();
  int writes = 0;
  for (const std::string& sql : texts) {
    if (sql.rfind("PRAGMA", 0) == 0) continue;
    auto program = (*conn)->Query("EXPLAIN " + sql, {});
    ASSERT_TRUE(program) << sql << ": " << program.error().message();
    if (sql.rfind("INSERT", 0) == 0 || sql.rfind("UPDATE", 0) == 0) ++writes;
    bool temporary_tree = false;
    bool automatic_index = false;
    for (const db::Row& op : *program) {
      temporary_tree |= op.Text(1) == "OpenEphemeral";
      automatic_index |= op.Text(1) == "OpenAutoindex";
    }
    EXPECT_FALSE(automatic_index) << "builds an automatic index (reads a whole table): " << sql;
    bool is_allowed = false;
    for (const std::string& prefix : allowed) is_allowed |= sql.rfind(prefix, 0) == 0;
    EXPECT_TRUE(!temporary_tree || is_allowed) << "builds a temporary b-tree: " << sql;
  }
  // The run did write: attaches, detaches, their sagas and NAT changes.
  EXPECT_GT(writes, 20);
}

}  // namespace
}  // namespace fp::sim
