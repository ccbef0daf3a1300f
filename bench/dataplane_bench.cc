// The Linux dataplane's costs (issue 13 item 6), on a lab of its own (scripts/lab; needs root,
// exits 77 without):
//
//   build/release/bench_dataplane [--binary build/release/floatplane] [--entries 100000]
//                                 [--changes 1000] [--round-trips 10000] [--attaches 100]
//                                 2>agent-requests.log
//
// 1. The switch agent (`--dataplane nftables`, in this process, over its HTTP API on loopback)
//    with one sled's port holding a floating IP: with 10 entries in its table, then with
//    --entries, the latency of one NAT change (one request adding or removing one entry:
//    the agent's HTTP handling and one nftables transaction) and the cost of a packet through
//    the switch (UDP round trips from the external network to the instance's responder and
//    back, one at a time: p50/p99 and round trips per second). Flat in the table's size is the
//    goal: the maps are hash tables.
// 2. The reload of --entries entries into a switch agent that just started empty (PUT /nat,
//    what the server's reconciler sends), three times.
// 3. A whole rack: `floatplane server --dev` driving a Linux switch agent and two Linux sled
//    agents (processes): for --attaches cycles, the time from the answer to an attach of a
//    floating IP to the first answer through it (UDP probes sent every 100 µs from the
//    external network, each from a fresh socket), then a detach. The attach answers after the
//    switch and the sled acknowledged, so this should be about one round trip.
//
// The in-process agent logs its requests to stderr; results go to stdout.

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "agents/daemon/switch_agent.h"
#include "agents/linux/sled_ports.h"
#include "agents/linux/switch_nat.h"
#include "agents/testing/lab.h"
#include "bench_util.h"

namespace fp::bench {
namespace {

using fp::IpAddr;
using fp::Uuid;
using fp::agents::NatChange;
using fp::agents::NatEntry;
using fp::agents::NatTable;
using fp::agents::dataplane::NetnsThread;
using fp::agents::dataplane::SledPorts;
using fp::agents::dataplane::SwitchNat;

constexpr const char* kSwitchUnderlay = "2001:db8:ff::1";
constexpr const char* kSledUnderlay[2] = {"2001:db8:10::1", "2001:db8:11::1"};
constexpr const char* kFloating = "203.0.113.10";

IpAddr Ip(const std::string& text) {
  auto ip = IpAddr::Parse(text);
  if (!ip) Die("bad address " + text);
  return *ip;
}

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Filler entry i: a distinct IPv4 address in 100.64.0.0/10, to the second sled.
NatEntry Filler(int i) {
  return NatEntry{IpAddr(fp::IpVersion::kV4, (fp::uint128{100} << 24 | fp::uint128{64} << 16) +
                                                 static_cast<uint64_t>(i)),
                  0,
                  65535,
                  Ip(kSledUnderlay[1]),
                  10,
                  "a8:40:25:00:00:02"};
}

NatEntry Floating() {
  return NatEntry{Ip(kFloating), 0, 65535, Ip(kSledUnderlay[0]), 10, "a8:40:25:00:00:01"};
}

// A UDP socket made in namespace `ns` (it stays there whichever thread uses it), connected to
// ip:port.
int UdpSocketIn(const std::string& ns, const std::string& ip, int port) {
  auto thread = NetnsThread::Start(ns);
  if (!thread) Die(thread.error().message());
  int fd = -1;
  auto made = (*thread)->Run([&]() -> fp::Status {
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
    if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      return fp::Fail(fp::Error::Internal(std::strerror(errno)));
    }
    return fp::Ok();
  });
  if (!made) Die("socket in " + ns + ": " + made.error().message());
  return fd;
}

// Sequential UDP round trips through the floating IP: per round trip in µs.
std::vector<double> RoundTrips(int fd, int count) {
  std::vector<double> us;
  us.reserve(static_cast<size_t>(count));
  char buf[512];
  for (int i = 0; i < count; ++i) {
    auto t0 = Clock::now();
    if (send(fd, "?", 1, 0) != 1) Die(std::string("send: ") + std::strerror(errno));
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 1000) != 1) Die("no answer through the floating IP within 1 s");
    if (recv(fd, buf, sizeof buf, 0) <= 0) Die("recv failed");
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return us;
}

struct SwitchUnderTest {
  std::unique_ptr<fp::agents::daemon::SwitchAgentDaemon> agent;
  std::unique_ptr<fp::agents::SwitchAgentClient> client;
};

SwitchUnderTest StartSwitch(const std::string& ns) {
  auto nat = SwitchNat::Open(ns, Ip(kSwitchUnderlay));
  if (!nat) Die(nat.error().message());
  auto agent = fp::agents::daemon::SwitchAgentDaemon::Start(fp::agents::daemon::DaemonOptions{},
                                                            std::move(*nat));
  if (!agent) Die(agent.error().message());
  auto client = fp::agents::MakeSwitchAgentClient((*agent)->base_url(), 600000);
  return {std::move(*agent), std::move(client)};
}

// Part 1 at the switch's current size: one change's latency and the packet cost.
void MeasureAtSize(SwitchUnderTest& sw, int fd, int64_t& gen, int changes, int round_trips,
                   size_t entries) {
  std::vector<double> change_ms;
  const NatEntry extra = Filler(999999);
  for (int i = 0; i < changes; ++i) {
    NatChange change{extra, ++gen, i % 2 == 1};
    auto t0 = Clock::now();
    auto applied = sw.client->ApplyChanges({change});
    change_ms.push_back(Ms(Clock::now() - t0));
    if (!applied) Die("NAT change: " + applied.error().message());
  }
  (void)RoundTrips(fd, 200);  // warm
  auto t0 = Clock::now();
  std::vector<double> us = RoundTrips(fd, round_trips);
  double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf(
      "%7zu entries: one NAT change p50 %.3f ms p99 %.3f ms (%d changes); packet round trip "
      "p50 %.1f us p99 %.1f us, %.0f round trips/s (%d)\n",
      entries, Percentile(change_ms, .5), Percentile(change_ms, .99), changes, Percentile(us, .5),
      Percentile(us, .99), round_trips / seconds, round_trips);
}

void SwitchAgentPart(const fp::agents::testing::Lab& lab, int entries, int changes,
                     int round_trips) {
  auto sled =
      SledPorts::Open(lab.ns("sled0"), Ip(kSledUnderlay[0]), Ip(kSwitchUnderlay), lab.ns("sled0"));
  if (!sled) Die(sled.error().message());
  const Uuid vm = *Uuid::Parse("aaaaaaaa-0000-4000-8000-000000000001");
  if (auto added = (*sled)->AddPort(vm, "bench", {Ip("172.30.0.10"), std::nullopt}); !added) {
    Die(added.error().message());
  }
  if (auto set = (*sled)->SetExternalIps(vm, {Ip(kFloating)}, std::nullopt); !set) {
    Die(set.error().message());
  }
  SwitchUnderTest sw = StartSwitch(lab.ns("sw"));
  std::vector<NatEntry> table = {Floating()};
  for (int i = 0; i < 9; ++i) table.push_back(Filler(i));
  int64_t gen = 1;
  if (auto r = sw.client->ReplaceAll(NatTable{gen, table}); !r) Die(r.error().message());
  int fd = UdpSocketIn(lab.ns("ext"), kFloating, 80);

  std::printf("switch agent (nftables, over HTTP on loopback), one sled's port behind it:\n");
  MeasureAtSize(sw, fd, gen, changes, round_trips, table.size());
  for (int i = 9; i < entries - 1; ++i) table.push_back(Filler(i));
  if (auto r = sw.client->ReplaceAll(NatTable{++gen, table}); !r) Die(r.error().message());
  MeasureAtSize(sw, fd, gen, changes, round_trips, table.size());

  // The sled's side of an attach and a detach (the detach flushes the address's flows).
  std::vector<double> add_ms, remove_ms;
  for (int i = 0; i < 200; ++i) {
    auto t0 = Clock::now();
    if (auto r = (*sled)->SetExternalIps(vm, {}, std::nullopt); !r) Die(r.error().message());
    auto t1 = Clock::now();
    if (auto r = (*sled)->SetExternalIps(vm, {Ip(kFloating)}, std::nullopt); !r) {
      Die(r.error().message());
    }
    remove_ms.push_back(Ms(t1 - t0));
    add_ms.push_back(Ms(Clock::now() - t1));
  }
  std::printf(
      "sled port (in process): address added p50 %.3f ms p99 %.3f ms, removed (with its "
      "conntrack flush) p50 %.3f ms p99 %.3f ms\n",
      Percentile(add_ms, .5), Percentile(add_ms, .99), Percentile(remove_ms, .5),
      Percentile(remove_ms, .99));

  std::printf("reload of %zu entries into a switch agent started empty (PUT /nat):", table.size());
  for (int run = 0; run < 3; ++run) {
    sw = SwitchUnderTest{};  // the agent stops; the next one deletes its table and starts empty
    sw = StartSwitch(lab.ns("sw"));
    auto t0 = Clock::now();
    if (auto r = sw.client->ReplaceAll(NatTable{++gen, table}); !r) Die(r.error().message());
    std::printf(" %.0f ms", Ms(Clock::now() - t0));
    std::fflush(stdout);
  }
  std::printf("\n");
  (void)RoundTrips(fd, 10);  // and it carries the floating IP again
  close(fd);
}

// Part 3: attach's answer to the first answer through the address, with the real server.
void RackPart(const fp::agents::testing::Lab& lab, const std::string& binary, int attaches) {
  std::vector<pid_t> children;
  char dir[] = "/tmp/floatplane-bench-dataplane-XXXXXX";
  if (!mkdtemp(dir)) Die("cannot create a temporary directory");
  const std::string secret = WriteAgentSecret(dir);
  auto [switch_pid, switch_url] = StartListening(
      {binary, "switch-agent", "--dataplane", "nftables", "--netns", lab.ns("sw"), "--underlay",
       kSwitchUnderlay, "--listen", "127.0.0.1:0", "--secret-file", secret});
  children.push_back(switch_pid);
  std::vector<std::string> server_args = {
      binary,        "server",         "--dev",    "--data-dir",          dir,   "--listen",
      "127.0.0.1:0", "--switch-agent", switch_url, "--agent-secret-file", secret};
  for (int i = 0; i < 2; ++i) {
    auto [pid, url] = StartListening({binary, "sled-agent", "--dataplane", "nftables", "--netns",
                                      lab.ns("sled" + std::to_string(i)), "--underlay",
                                      kSledUnderlay[i], "--switch-underlay", kSwitchUnderlay,
                                      "--listen", "127.0.0.1:0", "--secret-file", secret});
    children.push_back(pid);
    server_args.insert(server_args.end(), {"--sled-agent", url});
  }
  auto [server_pid, server_url] = StartListening(server_args);
  children.push_back(server_pid);
  std::string token;
  std::ifstream(std::string(dir) + "/admin-token") >> token;
  if (token.empty()) Die("no admin token");
  Api admin(PortOf(server_url), token);
  admin.Expect(201, "POST", "/v1/system/ip-pools", {{"name", "lab"}, {"description", ""}});
  admin.Expect(201, "POST", "/v1/system/ip-pools/lab/ranges/add",
               {{"first", "203.0.113.10"}, {"last", "203.0.113.250"}});
  admin.Expect(201, "POST", "/v1/system/ip-pools/lab/silos",
               {{"silo", "default"}, {"is_default", true}});
  admin.Expect(201, "POST", "/v1/projects", {{"name", "bench"}, {"description", ""}});
  Json vm = admin.Expect(201, "POST", "/v1/instances?project=bench",
                         {{"name", "probe"},
                          {"description", ""},
                          {"hostname", "probe"},
                          {"ncpus", 1},
                          {"memory", 1 << 30}});
  const std::string vm_id = vm["id"].get<std::string>();
  for (auto deadline = Clock::now() + std::chrono::seconds(30);;) {
    Json view = admin.Expect(200, "GET", "/v1/instances/" + vm_id);
    if (view["run_state"] == "running") break;
    if (Clock::now() > deadline) Die("the instance did not start: " + view.dump());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Json fip = admin.Expect(201, "POST", "/v1/floating-ips?project=bench",
                          {{"name", "probe"}, {"description", ""}});
  const std::string fip_id = fip["id"].get<std::string>();
  const std::string address = fip["ip"].get<std::string>();

  std::vector<double> attach_ms, first_ms, detach_ms;
  char buf[512];
  for (int i = 0; i < attaches; ++i) {
    int fd = UdpSocketIn(lab.ns("ext"), address, 80);
    auto t0 = Clock::now();
    admin.Expect(202, "POST", "/v1/floating-ips/" + fip_id + "/attach",
                 {{"kind", "instance"}, {"parent", vm_id}});
    auto answered = Clock::now();
    attach_ms.push_back(Ms(answered - t0));
    for (;;) {
      if (send(fd, "?", 1, 0) != 1) Die(std::string("send: ") + std::strerror(errno));
      pollfd p{fd, POLLIN, 0};
      timespec wait{0, 100000};
      if (ppoll(&p, 1, &wait, nullptr) == 1 && recv(fd, buf, sizeof buf, 0) > 0) break;
      if (Clock::now() - answered > std::chrono::seconds(10)) Die("no answer 10 s after attach");
    }
    first_ms.push_back(Ms(Clock::now() - answered));
    close(fd);
    auto t1 = Clock::now();
    admin.Expect(202, "POST", "/v1/floating-ips/" + fip_id + "/detach");
    detach_ms.push_back(Ms(Clock::now() - t1));
  }
  std::printf(
      "rack (server --dev, Linux switch and sled agents), %d attach/detach cycles of a "
      "floating IP:\n  attach request p50 %.2f ms p99 %.2f ms; detach request p50 %.2f ms p99 "
      "%.2f ms\n  attach answer to first answer through the address: p50 %.3f ms p99 %.3f ms "
      "max %.3f ms\n",
      attaches, Percentile(attach_ms, .5), Percentile(attach_ms, .99), Percentile(detach_ms, .5),
      Percentile(detach_ms, .99), Percentile(first_ms, .5), Percentile(first_ms, .99),
      Percentile(first_ms, 1));
  for (pid_t pid : children) kill(pid, SIGTERM);
  for (pid_t pid : children) waitpid(pid, nullptr, 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fp::bench

int main(int argc, char** argv) {
  std::string binary = "build/release/floatplane";
  int entries = 100000;
  int changes = 1000;
  int round_trips = 10000;
  int attaches = 100;
  using namespace fp::bench;  // NOLINT: this file's own namespace
  ParseFlags(argc, argv,
             {{"--binary", &binary},
              {"--entries", &entries},
              {"--changes", &changes},
              {"--round-trips", &round_trips},
              {"--attaches", &attaches}},
             "bench_dataplane [--binary PATH] [--entries N] [--changes N] "
             "[--round-trips N] [--attaches N]");
  if (entries < 20 || entries > 1000000) Die("--entries must be between 20 and 1000000");
  if (changes < 2 || round_trips < 1 || attaches < 1) {
    Die("--changes (at least 2), --round-trips and --attaches must be positive");
  }
  if (geteuid() != 0) {
    std::fprintf(stderr, "bench_dataplane: needs root (network namespaces); skipped\n");
    return 77;
  }
  if (access(binary.c_str(), X_OK) != 0) Die(binary + " is not an executable (--binary)");
  fp::agents::testing::Lab lab("fpb");
  if (!lab.ok()) Die("lab: " + lab.error());
  SwitchAgentPart(lab, entries, changes, round_trips);
  RackPart(lab, binary, attaches);
  return 0;
}
