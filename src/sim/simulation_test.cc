#include "sim/simulation.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

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
  EXPECT_NE(sim::Run(o).trace_hash, a.trace_hash);
}

// Seeds in CI: FLOATPLANE_SIM_SEEDS (default 100) runs of 60 steps with every fault.
TEST(Simulation, EverySeedKeepsTheInvariants) {
  int seeds = 100;
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

// One implementation of each rule (issue 27): PostgreSQL runs some of the datastore's decisions
// as its own statements (attach and detach as one statement each, allocation and release in
// PL/pgSQL). The same seeds on both engines must give the same runs: every answer of every
// step, and every row the final state lists. FLOATPLANE_SIM_PG_SEEDS runs (default 10); run by
// pg.sim_test on scripts/test's throwaway cluster, skipped without one.
TEST(Simulation, PostgreSqlAnswersEveryStepAsSqliteDoes) {
  if (!db::testing::OnPostgres()) GTEST_SKIP() << "FLOATPLANE_TEST_POSTGRES is not set";
  int seeds = 10;
  if (const char* n = std::getenv("FLOATPLANE_SIM_PG_SEEDS")) seeds = std::atoi(n);
  for (int s = 1; s <= seeds; ++s) {
    RunOptions o{.seed = static_cast<uint64_t>(s), .log_sync_faults = false};
    RunReport lite = sim::Run(o);
    db::testing::TempPostgresDatabase pg;
    o.postgres_url = pg.url();
    RunReport post = sim::Run(o);
    EXPECT_TRUE(post.violations.empty()) << "seed " << s << " on PostgreSQL\n" << Describe(post, o);
    EXPECT_EQ(lite.trace_hash, post.trace_hash)
        << "seed " << s << ": SQLite and PostgreSQL diverge at " << lite.FirstDifference(post);
  }
}

}  // namespace
}  // namespace fp::sim
