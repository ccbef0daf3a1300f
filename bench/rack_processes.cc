// bench_rack --agents external (rack_processes.h): 2 switch agents and N sled agents
// (`floatplane switch-agent --sim`, `sled-agent --sim`, no start or stop delay), and the server
// on a SQLite file, each a process; the instances created through the API, the NAT rows beyond
// the instances' own added to the database while the server is stopped (then the server starts
// again and reloads both switches). Prints:
//  - the idle server's CPU (its process alone, from /proc) and the agents' together;
//  - stops on one sled at 10 per second, and stops spread over the rack: from the API call to
//    the datastore answering `stopped` (the sled reports the change; GET polled every 2 ms);
//  - resident memory (now and peak) of the server, each switch agent and the largest sled agent.
// With FP_BENCH_ALL set in the environment, every stop's latency too (stderr, in call order:
// stops that finish together show as a falling run).

#include "rack_processes.h"

#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <filesystem>
#include <random>
#include <thread>

#include "agents/agent_secret.h"
#include "app/testing/rack_world.h"
#include "bench_util.h"
#include "db/datastore.h"

namespace fp::bench {
namespace {

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }
double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

void StopProcess(pid_t pid) {
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
}

std::string Project(int i) { return fmt::format("p{}", i / 200); }  // 200 per VPC subnet

// An agent's JSON answer, with the agents' secret.
Json AgentGet(const std::string& url, const std::string& authorization, const std::string& path) {
  http::HttpClient client("agent", url, std::chrono::seconds(30), authorization);
  auto answer = client.Call("GET", path);
  if (!answer || answer->status != 200) Die(url + path + ": no answer");
  return Json::parse(answer->body);
}

// Stops `ids`, one every `every`, each on its own thread, and returns the milliseconds from its
// stop call to the API answering run_state "stopped".
std::vector<double> TimedStops(uint16_t port, const std::string& token,
                               const std::vector<std::string>& ids, Clock::duration every) {
  std::vector<double> latency(ids.size());
  std::vector<std::thread> threads;
  auto next = Clock::now();
  for (size_t k = 0; k < ids.size(); ++k) {
    std::this_thread::sleep_until(next);
    next += every;
    threads.emplace_back([&, k] {
      Api api(port, token);
      auto began = Clock::now();
      api.Expect(202, "POST", "/v1/instances/" + ids[k] + "/stop");
      while (api.Expect(200, "GET", "/v1/instances/" + ids[k])["run_state"] != "stopped") {
        if (Clock::now() - began > std::chrono::seconds(60)) Die("a stop took over 60 s");
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      latency[k] = Ms(Clock::now() - began);
    });
  }
  for (auto& t : threads) t.join();
  return latency;
}

void PrintLatency(const char* what, const std::vector<double>& ms) {
  if (getenv("FP_BENCH_ALL")) {
    for (double v : ms) std::fprintf(stderr, "%.1f ", v);
    std::fprintf(stderr, "\n");
  }
  std::printf("%-48s %8.2f ms p50 %8.2f ms p99 %8.2f ms max (%zu)\n", what, Percentile(ms, 0.5),
              Percentile(ms, 0.99), Percentile(ms, 1.0), ms.size());
}

}  // namespace

int RunRackAgainstProcesses(const RackProcessOptions& o) {
  char tmpl[] = "/tmp/floatplane-rack-XXXXXX";
  if (!mkdtemp(tmpl)) Die("cannot create a temporary directory");
  const std::string dir = tmpl;
  const std::string secret = WriteAgentSecret(dir);
  const std::string authorization = agents::AgentSecret::ReadFile(secret)->AuthorizationHeader();
  setvbuf(stdout, nullptr, _IOLBF, 0);
  std::printf("%d instances on %d sleds, %d NAT entries on 2 switches; every agent a process\n",
              o.instances, o.sleds, o.nat);

  std::vector<pid_t> agents, switches;
  std::vector<std::string> sled_urls, switch_urls;
  std::vector<std::string> server_args = {o.binary,
                                          "server",
                                          "--data-dir",
                                          dir + "/server",
                                          "--listen",
                                          "127.0.0.1:0",
                                          "--database",
                                          "sqlite:" + dir + "/server/floatplane.db",
                                          "--agent-secret-file",
                                          secret};
  for (int s = 0; s < 2; ++s) {
    auto [pid, url] = StartListening(
        {o.binary, "switch-agent", "--sim", "--listen", "127.0.0.1:0", "--secret-file", secret});
    agents.push_back(pid);
    switches.push_back(pid);
    switch_urls.push_back(url);
    server_args.insert(server_args.end(), {"--switch-agent", url});
  }
  for (int s = 0; s < o.sleds; ++s) {
    auto [pid, url] =
        StartListening({o.binary, "sled-agent", "--sim", "--listen", "127.0.0.1:0", "--secret-file",
                        secret, "--start-delay-ms", "0", "--stop-delay-ms", "0"});
    agents.push_back(pid);
    sled_urls.push_back(url);
    server_args.insert(server_args.end(), {"--sled-agent", url});
  }
  auto [server, url] = StartListening(server_args);
  const uint16_t port = PortOf(url);
  std::string token;
  std::ifstream(dir + "/server/admin-token") >> token;
  if (token.empty()) Die("no admin token in the server's data directory");

  // Populate through the API.
  auto began = Clock::now();
  Api admin(port, token);
  admin.Expect(201, "POST", "/v1/system/ip-pools", {{"name", "rack"}, {"description", ""}});
  admin.Expect(201, "POST", "/v1/system/ip-pools/rack/ranges/add",
               {{"first", "10.0.0.0"}, {"last", "10.0.255.255"}});
  admin.Expect(201, "POST", "/v1/system/ip-pools/rack/silos",
               {{"silo", "default"}, {"is_default", true}});
  for (int p = 0; p <= (o.instances - 1) / 200; ++p) {
    admin.Expect(201, "POST", "/v1/projects", {{"name", Project(p * 200)}, {"description", ""}});
  }
  std::atomic<int> next{0};
  std::vector<std::thread> creators;
  for (int t = 0; t < o.threads; ++t) {
    creators.emplace_back([&] {
      Api api(port, token);
      for (int i = next++; i < o.instances; i = next++) {
        std::string name = fmt::format("vm-{}", i);
        api.Expect(201, "POST", "/v1/instances?project=" + Project(i),
                   {{"name", name},
                    {"description", ""},
                    {"hostname", name},
                    {"ncpus", 1},
                    {"memory", int64_t{1} << 30}});
      }
    });
  }
  for (auto& t : creators) t.join();
  std::printf("%-48s %8.1f s\n", "instances created through the API",
              Seconds(Clock::now() - began));

  // The rest of the NAT table, written while the server is stopped; it reloads the switches.
  Memory populating = MemoryOf(server);
  std::printf("%-48s %8.1f MiB now %8.1f MiB peak\n", "memory: the server that populated",
              populating.rss_mib, populating.peak_mib);
  StopProcess(server);
  {
    auto ds =
        db::Datastore::OpenSqlite(dir + "/server/floatplane.db", std::make_shared<SystemClock>(),
                                  std::make_shared<SystemRandom>());
    if (!ds) Die(ds.error().message());
    if (auto added = app::testing::AddUnownedNatRows(**ds, 0, std::max(0, o.nat - o.instances));
        !added) {
      Die(added.error().message());
    }
  }
  auto restarted = Clock::now();
  std::tie(server, url) = StartListening(server_args);
  const uint16_t api_port = PortOf(url);
  for (const std::string& s : switch_urls) {
    while (AgentGet(s, authorization, "/nat/status")["entries"].get<int64_t>() < o.nat) {
      if (Clock::now() - restarted > std::chrono::minutes(5)) Die(s + " never held the table");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  std::printf("%-48s %8.1f s\n", "server restarted -> both switches hold the table",
              Seconds(Clock::now() - restarted));
  for (const std::string& s : sled_urls) {
    while (true) {
      int running = 0;
      const Json vms = AgentGet(s, authorization, "/instances");
      for (const Json& vm : vms["instances"]) {
        running += vm["state"] == "running";
      }
      if (running * o.sleds >= o.instances - o.sleds) break;  // placement is near even
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  // Idle.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  double server0 = CpuSeconds({server}), agents0 = CpuSeconds(agents);
  auto idle0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(o.idle_s));
  double idle = Seconds(Clock::now() - idle0);
  std::printf("%-48s %8.2f %% of a core\n", "idle CPU: the server",
              (CpuSeconds({server}) - server0) / idle * 100);
  std::printf("%-48s %8.2f %% of a core\n",
              fmt::format("idle CPU: the {} agents together", agents.size()).c_str(),
              (CpuSeconds(agents) - agents0) / idle * 100);

  // Stops on one sled, then over the rack.
  std::vector<std::vector<std::string>> running(o.sleds);
  for (int s = 0; s < o.sleds; ++s) {
    const Json vms = AgentGet(sled_urls[s], authorization, "/instances");
    for (const Json& vm : vms["instances"]) {
      if (vm["state"] == "running") running[s].push_back(vm["id"].get<std::string>());
    }
  }
  std::vector<std::string> one_sled(
      running[0].begin(), running[0].begin() + std::min<long>(o.burst, running[0].size()));
  running[0].erase(running[0].begin(), running[0].begin() + static_cast<long>(one_sled.size()));
  PrintLatency("stops on one sled, 10/s: call -> stopped",
               TimedStops(api_port, token, one_sled, std::chrono::milliseconds(100)));
  std::mt19937 random(42);
  std::vector<std::string> spread;
  for (int k = 0; k < o.spread; ++k) {
    auto& sled = running[random() % running.size()];
    if (sled.empty()) continue;
    spread.push_back(sled.back());
    sled.pop_back();
  }
  PrintLatency(fmt::format("stops over the rack, {}/s: call -> stopped", o.spread / 10).c_str(),
               TimedStops(api_port, token, spread, std::chrono::milliseconds(10'000) / o.spread));

  auto memory = [](const char* what, pid_t pid) {
    Memory m = MemoryOf(pid);
    std::printf("%-48s %8.1f MiB now %8.1f MiB peak\n", what, m.rss_mib, m.peak_mib);
  };
  memory("memory: the server (restarted, reloaded both)", server);
  memory("memory: switch agent 0", switches[0]);
  memory("memory: switch agent 1", switches[1]);
  pid_t largest = agents[2];
  for (size_t a = 2; a < agents.size(); ++a) {
    if (MemoryOf(agents[a]).rss_mib > MemoryOf(largest).rss_mib) largest = agents[a];
  }
  memory("memory: the largest sled agent", largest);

  // Drift: switch 0 loses one entry at the same generation, behind the control plane's back.
  // The server finds it by digest and repairs it with a whole-table comparison (its switch's
  // table and the datastore's at once): the server's peak after it is that repair's.
  const Json status = AgentGet(switch_urls[0], authorization, "/nat/status");
  {
    Json table = AgentGet(switch_urls[0], authorization, "/nat");
    Json& entries = table["entries"];
    entries.erase(entries.begin() + static_cast<long>(entries.size() / 2));
    table["if_generation"] = table["generation"];
    http::HttpClient client("switch agent", switch_urls[0], std::chrono::seconds(30),
                            authorization);
    auto put = client.Call("PUT", "/nat", table.dump());
    if (!put || put->status != 200) Die("switch agent 0 refused the drifted table");
  }
  const auto drifted = Clock::now();
  while (AgentGet(switch_urls[0], authorization, "/nat/status")["digest"] != status["digest"]) {
    if (Clock::now() - drifted > std::chrono::seconds(60)) Die("the drift was never repaired");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::printf("%-48s %8.1f ms\n", "one entry lost -> found by digest, repaired",
              Ms(Clock::now() - drifted));
  memory("memory: the server after the repair", server);

  StopProcess(server);
  for (pid_t a : agents) StopProcess(a);
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace fp::bench
