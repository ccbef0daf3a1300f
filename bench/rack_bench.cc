// The rack at full size (issue 15): 10,000 running instances on 32 sleds, 100,000 NAT entries
// on two switches, in one process (app/testing/rack_world.h: the real datastore, simulated
// agents over HTTP on loopback, the server's NAT heartbeats and sled reports).
//
//   build/release/bench_rack [--instances 10000] [--sleds 32] [--nat 100000] [--idle-s 10]
//                            [--samples 200] [--agents in-process|external [--binary PATH]]
//
// With --agents external every agent and the server are processes (rack_processes.h), and the
// figures are the server's own; what follows describes the in-process rack.
//
// Prints:
//  - idle CPU: the whole process's (the server's background work and the 34 agents serving
//    it) while nothing happens, in % of one core;
//  - state-change latency: from a VM's state changing on its sled to the datastore recording
//    it, p50/p99 over --samples changes;
//  - switch restart: from a switch agent restarting empty to it holding the whole table again
//    (detection by the heartbeat, then the reload);
//  - drift repair: from a switch losing one entry behind the control plane's back (at the same
//    generation) to the entry being back, found by digest.

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "app/testing/rack_world.h"
#include "bench_util.h"
#include "common/log.h"
#include "db/instances.h"
#include "http/client.h"
#include "rack_processes.h"

namespace {

using Clock = std::chrono::steady_clock;
using fp::app::testing::RackWorld;

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

void WaitEqual(RackWorld& rack, const char* what) {
  auto began = Clock::now();
  for (;;) {
    auto d = rack.Disagreement();
    if (!d) break;
    if (Clock::now() - began > std::chrono::minutes(5)) {
      std::fprintf(stderr, "%s: no agreement after 5 minutes: %s\n", what, d->c_str());
      std::exit(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  std::printf("%-44s %8.1f s\n", what, std::chrono::duration<double>(Clock::now() - began).count());
}

}  // namespace

int main(int argc, char** argv) {
  fp::SetLogLevel(fp::LogLevel::kWarn);
  int instances = 10000, sleds = 32, nat = 100000, idle_s = 10, samples = 200;
  std::string agents = "in-process", binary = "build/release/floatplane";
  fp::bench::ParseFlags(argc, argv,
                        {{"--instances", &instances},
                         {"--sleds", &sleds},
                         {"--nat", &nat},
                         {"--idle-s", &idle_s},
                         {"--samples", &samples},
                         {"--agents", &agents},
                         {"--binary", &binary}},
                        "bench_rack [--instances N] [--sleds N] [--nat N] [--idle-s S] "
                        "[--samples N] [--agents in-process|external] [--binary PATH]");
  if (instances < 1 || sleds < 1 || samples < 1 || idle_s < 1) {
    fp::bench::Die("--instances, --sleds, --idle-s and --samples must be positive");
  }
  if (agents == "external") {
    return fp::bench::RunRackAgainstProcesses({.binary = binary.c_str(),
                                               .instances = instances,
                                               .sleds = sleds,
                                               .nat = nat,
                                               .idle_s = idle_s});
  }
  if (agents != "in-process") {
    fp::bench::Die("--agents must be in-process or external, not \"" + agents + "\"");
  }

  RackWorld rack({.sleds = sleds, .switches = 2, .heartbeat_ms = 100, .watch = {}});
  std::printf("%d instances on %d sleds, %d NAT entries on 2 switches\n", instances, sleds, nat);
  auto began = Clock::now();
  if (auto s = rack.AddNatRows(std::max(0, nat - instances)); !s) {
    std::fprintf(stderr, "NAT rows: %s\n", s.error().message().c_str());
    return 1;
  }
  rack.StartBackground();
  auto created = rack.CreateInstances(instances, 8);
  if (!created) {
    std::fprintf(stderr, "instances: %s\n", created.error().message().c_str());
    return 1;
  }
  std::printf("%-44s %8.1f s\n", "populated (instances created and started)",
              std::chrono::duration<double>(Clock::now() - began).count());
  WaitEqual(rack, "converged (datastore, switches, sleds equal)");

  // Idle: nothing asked of the rack.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  double cpu0 = CpuSeconds();
  auto idle0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(idle_s));
  double idle_cpu =
      (CpuSeconds() - cpu0) / std::chrono::duration<double>(Clock::now() - idle0).count() * 100;
  std::printf("%-44s %8.2f %% of a core\n",
              fmt::format("idle CPU (server and {} agents)", sleds + 2).c_str(), idle_cpu);

  // State changes: a running VM becomes `stopping` on its sled; the datastore records it.
  std::vector<double> latency;
  std::mt19937 random(42);
  for (int n = 0; n < samples; ++n) {
    size_t k = random() % rack.sled_sims.size();
    auto vms = rack.sled_sims[k]->Instances();
    if (vms.empty()) continue;
    fp::Uuid id = vms[random() % vms.size()].id;
    auto changed = Clock::now();
    rack.sled_sims[k]->ForceState(id, fp::agents::VmState::kStopping);
    for (;;) {
      auto i = fp::db::InstanceAnyState(*rack.ds, id);
      if (i && i->run_state == fp::model::RunState::kStopping) break;
      if (Clock::now() - changed > std::chrono::seconds(10)) {
        std::fprintf(stderr, "state change not recorded within 10 s\n");
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    latency.push_back(Ms(Clock::now() - changed));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::printf("%-44s %8.2f ms p50 %8.2f ms p99 (%zu changes)\n",
              "state change on a sled -> datastore", fp::bench::Percentile(latency, 0.5),
              fp::bench::Percentile(latency, 0.99), latency.size());

  // A switch agent restarts empty.
  auto want = rack.switch_sims[0]->CurrentStatus();
  fp::http::HttpClient control("switch agent", rack.switch_sims[1]->base_url(),
                               std::chrono::milliseconds(10000));
  auto reset_at = Clock::now();
  if (!control.Call("POST", "/reset")) return 1;
  for (;;) {
    auto now = rack.switch_sims[1]->CurrentStatus();
    if (now.generation >= want.generation && now.digest == want.digest) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::printf("%-44s %8.1f ms (%lld entries)\n", "switch restarted empty -> whole table again",
              Ms(Clock::now() - reset_at), static_cast<long long>(want.entries));

  // Drift: switch 0 loses one entry at the same generation.
  fp::agents::NatTable table = rack.switch_sims[0]->Nat();
  table.entries.erase(table.entries.begin() + static_cast<long>(table.entries.size() / 2));
  nlohmann::json body = table.ToJson();
  body["if_generation"] = table.generation;
  fp::http::HttpClient control0("switch agent", rack.switch_sims[0]->base_url(),
                                std::chrono::milliseconds(10000));
  auto put = control0.Call("PUT", "/nat", body.dump());
  if (!put || put->status != 200) return 1;
  auto drifted_at = Clock::now();
  for (;;) {
    if (rack.switch_sims[0]->CurrentStatus().digest == want.digest) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::printf("%-44s %8.1f ms\n", "one entry lost -> found by digest, repaired",
              Ms(Clock::now() - drifted_at));
  rack.StopBackground();
  return 0;
}
