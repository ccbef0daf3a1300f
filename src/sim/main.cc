// floatplane-sim: runs the deterministic simulation of the control plane (sim/simulation.h)
// for one seed or many, and prints what failed with the command that replays it.
//
//   floatplane-sim --seeds 500              seeds 1..500, a line per failure, a summary
//   floatplane-sim --seed 42 --trace        one run, every step printed
//
// Seeds run on --jobs threads at once (default: one per core). A run shares nothing with
// another (its own rack, clock, randomness and database), so its outcome and trace hash do not
// depend on the threads; the output is printed in seed order as the runs finish.

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <optional>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/mutex.h"
#include "sim/simulation.h"

int main(int argc, char** argv) {
  CLI::App app{"floatplane-sim: the control plane in a deterministic simulation"};
  uint64_t seed = 0;
  uint64_t first = 1;
  int seeds = 100;
  fp::sim::RunOptions options;
  bool no_faults = false;
  bool trace = false;
  app.add_option("--seed", seed, "Run this one seed (replays a failure)");
  app.add_option("--seeds", seeds, "How many seeds to run, from --first (default 100)")
      ->check(CLI::Range(0, 1000000000));
  app.add_option("--first", first, "The first seed of --seeds (default 1)");
  app.add_option("--operations", options.operations, "Operations per run (default 60)");
  app.add_flag("--no-faults", no_faults, "No network faults, agent restarts or server crashes");
  app.add_option("--servers", options.shape.servers,
                 "Control-plane servers on the one database, with leases and adoption as on "
                 "PostgreSQL (default 1)")
      ->check(CLI::Range(1, 8));
  app.add_flag("--trace", trace, "Print every step of each run and its final state");
  bool logs = false;
  app.add_flag("--logs", logs, "Print the server's and the agents' log lines (stderr)");
  int jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  app.add_option("--jobs", jobs, "Seeds run at once, each on a thread (default: one per core)")
      ->check(CLI::Range(1, 256));
  CLI11_PARSE(app, argc, argv);
  // The runs' own log lines are noise unless asked for: errors only.
  fp::SetLogLevel(logs ? fp::LogLevel::kDebug : fp::LogLevel::kError);
  options.faults = !no_faults;
  if (seed != 0) {
    first = seed;
    seeds = 1;
  }

  // The composition root of this tool: the machine's clock times the runs themselves.
  const auto began = std::chrono::steady_clock::now();
  int failed = 0;
  int64_t crashes = 0;
  int64_t adopted = 0;
  int64_t restarts = 0;
  int64_t faults = 0;
  int64_t slow_syncs = 0;
  int64_t operations = 0;
  // Workers take the next seed and leave its report in its slot; this thread prints the slots
  // in order as they fill.
  fp::Mutex mu;
  std::condition_variable filled;
  std::vector<std::optional<fp::sim::RunReport>> reports(static_cast<size_t>(std::max(seeds, 0)));
  size_t next = 0;
  std::vector<std::thread> workers;
  for (int j = 0; j < std::min(jobs, seeds); ++j) {
    workers.emplace_back([&, options] {
      fp::sim::RunOptions mine = options;
      for (;;) {
        size_t k;
        {
          fp::MutexLock lock(mu);
          if (next == reports.size()) return;
          k = next++;
        }
        mine.seed = first + k;
        fp::sim::RunReport report = fp::sim::Run(mine);
        fp::MutexLock lock(mu);
        reports[k] = std::move(report);
        filled.notify_one();
      }
    });
  }
  for (size_t k = 0; k < reports.size(); ++k) {
    const uint64_t s = first + k;
    options.seed = s;
    fp::sim::RunReport report;
    {
      fp::MutexLock lock(mu);
      lock.Wait(filled, [&] { return reports[k].has_value(); });
      report = std::move(*reports[k]);
      reports[k].reset();
    }
    crashes += report.server_crashes;
    adopted += report.adopted;
    restarts += report.agent_restarts;
    faults += report.network_faults;
    slow_syncs += report.slow_syncs;
    operations += report.operations;
    if (trace) {
      for (const auto& line : report.trace) std::printf("%s\n", line.c_str());
      std::printf("seed %llu: trace hash %016llx\n", static_cast<unsigned long long>(s),
                  static_cast<unsigned long long>(report.trace_hash));
    }
    if (report.violations.empty()) continue;
    ++failed;
    std::printf("seed %llu FAILED (%zu invariant(s)); replay: %s --trace\n",
                static_cast<unsigned long long>(s), report.violations.size(),
                fp::sim::ReplayCommand(options).c_str());
    for (const auto& v : report.violations) std::printf("  %s\n", v.c_str());
    std::fflush(stdout);
  }
  for (std::thread& w : workers) w.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  const std::string adoptions =
      options.shape.servers > 1 ? fmt::format(", {} sagas adopted", adopted) : "";
  std::printf(
      "%d seed(s), %d failed; %lld operations, %lld network faults, %lld agent restarts, "
      "%lld server crashes%s, %lld slow log syncs; %.1f s (%.0f seeds/minute)\n",
      seeds, failed, static_cast<long long>(operations), static_cast<long long>(faults),
      static_cast<long long>(restarts), static_cast<long long>(crashes), adoptions.c_str(),
      static_cast<long long>(slow_syncs), seconds, seconds > 0 ? seeds * 60.0 / seconds : 0.0);
  return failed == 0 ? 0 : 1;
}
