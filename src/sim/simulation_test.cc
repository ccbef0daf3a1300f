#include "sim/simulation.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

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
  for (int s = 1; s <= seeds; ++s) {
    RunOptions o{.seed = static_cast<uint64_t>(s)};
    RunReport r = sim::Run(o);
    crashes += r.server_crashes;
    restarts += r.agent_restarts;
    EXPECT_TRUE(r.violations.empty()) << "seed " << s << "\n" << Describe(r, o);
  }
  // The faults really happen.
  EXPECT_GT(crashes, 0);
  EXPECT_GT(restarts, 0);
}

}  // namespace
}  // namespace fp::sim
