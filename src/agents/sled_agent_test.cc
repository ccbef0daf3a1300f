// The sled agent's HTTP client against the simulated sled agent: every call, and the
// asynchronous start and stop of instances.

#include "agents/daemon/sled_agent.h"

#include <gtest/gtest.h>

#include "agents/agents.h"
#include "common/testing/ip.h"
#include "common/testing/manual_clock.h"
#include "common/testing/wait_for.h"
#include "http/client.h"

namespace fp::agents {
namespace {

using Json = nlohmann::json;
using daemon::DaemonOptions;
using daemon::SledAgentDaemon;
using fp::testing::WaitFor;
using http::HttpClient;
using std::chrono::milliseconds;

using fp::testing::Ip;

InstanceSpec Spec(std::vector<IpAddr> external_ips = {},
                  std::optional<IpAddr> snat_ip = std::nullopt) {
  return InstanceSpec{.id = Uuid::Random(),
                      .ncpus = 2,
                      .memory = 1 << 30,
                      .vni = 100,
                      .mac = "a8:40:25:f0:00:01",
                      .private_ipv4 = Ip("172.30.0.5"),
                      .external_ips = std::move(external_ips),
                      .snat_ip = snat_ip,
                      .snat_last_port = snat_ip ? 16383 : 0};
}

class SledAgentTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(DaemonOptions{}); }

  void Start(const DaemonOptions& options) {
    agent_ = SledAgentDaemon::Start(options).value();
    client_ = MakeSledAgentClient(agent_->base_url(), 2000);
    control_ = std::make_unique<HttpClient>("sled agent", agent_->base_url(), milliseconds(2000));
  }

  // Polls the sled (over HTTP) until the instance is in `state`.
  bool ReachesState(const Uuid& id, VmState state) {
    return WaitFor([&] {
      auto instance = client_->Get(id);
      return instance && instance->state == state;
    });
  }

  fp::testing::ManualClock clock_;  // for agents started on it; outlives them
  std::unique_ptr<SledAgentDaemon> agent_;
  std::unique_ptr<SledAgentClient> client_;
  std::unique_ptr<HttpClient> control_;
};

// The agent's transitions run on its clock: a manual one shows that an instance stays starting
// (stopping) until the delay has passed on it, however long that takes in real time, and
// becomes running (stopped) once it has.
TEST_F(SledAgentTest, StartIsStartingThenRunningOnceTheStartDelayPassed) {
  constexpr milliseconds kDelay = std::chrono::hours(1);  // of the agent's clock: no real wait
  Start(DaemonOptions{.start_delay = kDelay, .clock = &clock_});
  InstanceSpec spec = Spec();
  SledInstance answer = client_->EnsureRunning(spec).value();
  EXPECT_EQ(answer.id, spec.id);
  EXPECT_EQ(answer.state, VmState::kStarting);
  clock_.Advance(kDelay - milliseconds(1));
  EXPECT_EQ(client_->Get(spec.id).value().state, VmState::kStarting);
  clock_.Advance(milliseconds(1));
  ASSERT_TRUE(ReachesState(spec.id, VmState::kRunning));
}

TEST_F(SledAgentTest, StopIsStoppingThenStoppedOnceTheStopDelayPassed) {
  constexpr milliseconds kDelay = std::chrono::hours(1);
  Start(DaemonOptions{.stop_delay = kDelay, .clock = &clock_});
  InstanceSpec spec = Spec();
  ASSERT_TRUE(client_->EnsureRunning(spec));
  ASSERT_TRUE(ReachesState(spec.id, VmState::kRunning));
  EXPECT_EQ(client_->Stop(spec.id).value().state, VmState::kStopping);
  clock_.Advance(kDelay - milliseconds(1));
  EXPECT_EQ(client_->Stop(spec.id).value().state, VmState::kStopping);
  clock_.Advance(milliseconds(1));
  ASSERT_TRUE(ReachesState(spec.id, VmState::kStopped));
  EXPECT_EQ(client_->Stop(spec.id).value().state, VmState::kStopped);
}

TEST_F(SledAgentTest, EnsureRunningOnARunningInstanceOnlyUpdatesItsSpec) {
  InstanceSpec spec = Spec({Ip("198.51.100.1")});
  ASSERT_TRUE(client_->EnsureRunning(spec));
  ASSERT_TRUE(ReachesState(spec.id, VmState::kRunning));
  spec.external_ips = {Ip("198.51.100.2")};
  SledInstance again = client_->EnsureRunning(spec).value();
  EXPECT_EQ(again.state, VmState::kRunning);
  EXPECT_EQ(again.external_ips, std::vector<IpAddr>{Ip("198.51.100.2")});
  EXPECT_EQ(agent_->Spec(spec.id), spec);
}

TEST_F(SledAgentTest, EnsureRunningStartsAStoppedInstanceAgain) {
  InstanceSpec spec = Spec();
  ASSERT_TRUE(client_->EnsureRunning(spec));
  ASSERT_TRUE(client_->Stop(spec.id));
  ASSERT_TRUE(ReachesState(spec.id, VmState::kStopped));
  EXPECT_EQ(client_->EnsureRunning(spec).value().state, VmState::kStarting);
  EXPECT_TRUE(ReachesState(spec.id, VmState::kRunning));
}

TEST_F(SledAgentTest, StoppingAnUnknownInstanceAnswersStopped) {
  Uuid id = Uuid::Random();
  SledInstance answer = client_->Stop(id).value();
  EXPECT_EQ(answer.id, id);
  EXPECT_EQ(answer.state, VmState::kStopped);
  EXPECT_FALSE(agent_->Instance(id));
}

TEST_F(SledAgentTest, AMigratingInstanceStopsAndAFailedOneIsStoppedAtOnce) {
  InstanceSpec migrating = Spec();
  InstanceSpec failed = Spec();
  ASSERT_TRUE(client_->EnsureRunning(migrating));
  ASSERT_TRUE(client_->EnsureRunning(failed));
  ASSERT_TRUE(agent_->ForceState(migrating.id, VmState::kMigrating));
  ASSERT_TRUE(agent_->ForceState(failed.id, VmState::kFailed));
  EXPECT_EQ(client_->Get(migrating.id).value().state, VmState::kMigrating);
  EXPECT_EQ(client_->Stop(failed.id).value().state, VmState::kStopped);
  EXPECT_EQ(client_->Stop(migrating.id).value().state, VmState::kStopping);
  EXPECT_TRUE(ReachesState(migrating.id, VmState::kStopped));
}

TEST_F(SledAgentTest, UnregisterForgetsTheInstanceAndIsIdempotent) {
  InstanceSpec spec = Spec();
  ASSERT_TRUE(client_->EnsureRunning(spec));
  EXPECT_TRUE(client_->Unregister(spec.id));
  auto gone = client_->Get(spec.id);
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().kind(), ErrorKind::kNotFound);
  EXPECT_EQ(gone.error().message().rfind("sled agent at " + agent_->base_url() + ": ", 0), 0u)
      << gone.error().message();
  EXPECT_TRUE(client_->Unregister(spec.id));
  EXPECT_TRUE(client_->List().value().empty());
}

TEST_F(SledAgentTest, ListShowsEachInstanceWithStateAndExternalIpsSnatLast) {
  InstanceSpec with_snat = Spec({Ip("198.51.100.1"), Ip("2001:db8::5")}, Ip("198.51.100.9"));
  InstanceSpec bare = Spec();
  ASSERT_TRUE(client_->EnsureRunning(with_snat));
  ASSERT_TRUE(client_->EnsureRunning(bare));
  ASSERT_TRUE(ReachesState(with_snat.id, VmState::kRunning));

  std::vector<SledInstance> listed = client_->List().value();
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed, agent_->Instances());
  auto answer = control_->Call("GET", "/instances");
  ASSERT_TRUE(answer);
  Json body = Json::parse(answer->body);
  ASSERT_EQ(body["instances"].size(), 2u);
  for (const Json& instance : body["instances"]) {
    if (instance["id"] != with_snat.id.ToString()) continue;
    EXPECT_EQ(instance["state"], "running");
    EXPECT_EQ(instance["external_ips"],
              Json::parse(R"(["198.51.100.1", "2001:db8::5", "198.51.100.9"])"));
  }
  SledInstance viewed = client_->Get(with_snat.id).value();
  EXPECT_EQ(viewed.snat_ip, Ip("198.51.100.9"));
}

TEST_F(SledAgentTest, ExternalIpsAreAddedAndRemovedIdempotently) {
  InstanceSpec spec = Spec({}, Ip("198.51.100.9"));
  ASSERT_TRUE(client_->EnsureRunning(spec));
  EXPECT_TRUE(client_->AddExternalIp(spec.id, Ip("198.51.100.1")));
  EXPECT_TRUE(client_->AddExternalIp(spec.id, Ip("2001:db8::1")));
  EXPECT_TRUE(client_->AddExternalIp(spec.id, Ip("198.51.100.1")));
  EXPECT_EQ(client_->Get(spec.id).value().external_ips,
            (std::vector<IpAddr>{Ip("198.51.100.1"), Ip("2001:db8::1"), Ip("198.51.100.9")}));
  EXPECT_TRUE(client_->RemoveExternalIp(spec.id, Ip("198.51.100.1")));
  EXPECT_TRUE(client_->RemoveExternalIp(spec.id, Ip("198.51.100.1")));
  EXPECT_TRUE(client_->RemoveExternalIp(spec.id, Ip("2001:db8::1")));
  EXPECT_EQ(client_->Get(spec.id).value().external_ips, std::vector<IpAddr>{Ip("198.51.100.9")});

  Uuid unknown = Uuid::Random();
  EXPECT_EQ(client_->AddExternalIp(unknown, Ip("198.51.100.1")).error().kind(),
            ErrorKind::kNotFound);
  EXPECT_EQ(client_->RemoveExternalIp(unknown, Ip("198.51.100.1")).error().kind(),
            ErrorKind::kNotFound);
  // The SNAT address belongs to the spec; the sled refuses (4xx: Internal for the caller).
  EXPECT_EQ(client_->RemoveExternalIp(spec.id, Ip("198.51.100.9")).error().kind(),
            ErrorKind::kInternal);
}

TEST_F(SledAgentTest, ASpecForAnotherInstanceIsRefused) {
  InstanceSpec spec = Spec();
  auto answer =
      control_->Call("PUT", "/instances/" + Uuid::Random().ToString(), spec.ToJson().dump());
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 400);
  EXPECT_EQ(control_->Call("GET", "/instances/not-a-uuid").value().status, 400);
  EXPECT_TRUE(agent_->Instances().empty());
}

TEST_F(SledAgentTest, AnAddressThatIsNotUtf8IsRefusedNotCrashedOn) {
  InstanceSpec spec = Spec();
  ASSERT_TRUE(client_->EnsureRunning(spec));
  auto answer = control_->Call("PUT", "/instances/" + spec.id.ToString() + "/external-ips/%FF%FE");
  ASSERT_TRUE(answer) << answer.error().message();
  EXPECT_EQ(answer->status, 400);
  EXPECT_NE(answer->body.find("invalid IP address"), std::string::npos) << answer->body;
}

TEST_F(SledAgentTest, ResetForgetsEveryInstance) {
  ASSERT_TRUE(client_->EnsureRunning(Spec()));
  ASSERT_TRUE(client_->EnsureRunning(Spec()));
  ASSERT_EQ(client_->List().value().size(), 2u);
  ASSERT_EQ(control_->Call("POST", "/reset").value().status, 200);
  EXPECT_TRUE(client_->List().value().empty());
}

}  // namespace
}  // namespace fp::agents

namespace fp::agents {
namespace {

TEST(SledAgentIdentity, ASimulatedSledHasNoneAndOneWithItsOwnSaysIt) {
  auto simulated = daemon::SledAgentDaemon::Start(daemon::DaemonOptions{}).value();
  SledIdentity none = MakeSledAgentClient(simulated->base_url(), 2000)->Identity().value();
  EXPECT_EQ(none.underlay, std::nullopt);
  EXPECT_EQ(none.serial, std::nullopt);
  daemon::DaemonOptions options;
  options.underlay = IpAddr::Parse("2001:db8:10::1").value();
  options.serial = "BRM42220007";
  auto own = daemon::SledAgentDaemon::Start(options).value();
  SledIdentity said = MakeSledAgentClient(own->base_url(), 2000)->Identity().value();
  EXPECT_EQ(said.underlay, std::optional<IpAddr>(IpAddr::Parse("2001:db8:10::1").value()));
  EXPECT_EQ(said.serial, std::optional<std::string>("BRM42220007"));
}

}  // namespace
}  // namespace fp::agents

namespace fp::agents {
namespace {

class SledReportTest : public SledAgentTest {
 protected:
  void SetUp() override {
    DaemonOptions options;
    options.start_delay = milliseconds(100);
    options.stop_delay = milliseconds(10'000);
    Start(options);
  }
  static std::vector<Uuid> Ids(const SledReport& r) {
    std::vector<Uuid> out;
    for (const SledInstance& i : r.instances) out.push_back(i.id);
    return out;
  }
};

TEST_F(SledReportTest, AFirstCallGetsTheWholeListThenOnlyChanges) {
  InstanceSpec a = Spec(), b = Spec();
  ASSERT_TRUE(client_->EnsureRunning(a));
  ASSERT_TRUE(client_->EnsureRunning(b));
  SledReport first = client_->Changes("", 0, milliseconds(0)).value();
  EXPECT_TRUE(first.full);
  EXPECT_EQ(first.instances.size(), 2u);
  EXPECT_FALSE(first.boot_id.empty());

  // Nothing changed after it: the call waits for the next change (a's start delay ending).
  ASSERT_TRUE(ReachesState(b.id, VmState::kRunning));
  SledReport settled = client_->Changes(first.boot_id, 0, milliseconds(0)).value();
  ASSERT_TRUE(client_->Stop(a.id));
  SledReport next =
      client_->Changes(settled.boot_id, settled.generation, milliseconds(2000)).value();
  EXPECT_FALSE(next.full);
  EXPECT_EQ(Ids(next), std::vector<Uuid>{a.id});
  EXPECT_EQ(next.instances[0].state, VmState::kStopping);
  EXPECT_TRUE(next.removed.empty());

  ASSERT_TRUE(client_->Unregister(b.id));
  SledReport removal = client_->Changes(next.boot_id, next.generation, milliseconds(2000)).value();
  EXPECT_FALSE(removal.full);
  EXPECT_EQ(removal.removed, std::vector<Uuid>{b.id});
}

TEST_F(SledReportTest, ALongPollReturnsAtTheChangeNotAtItsDeadline) {
  SledReport now = client_->Changes("", 0, milliseconds(0)).value();
  InstanceSpec a = Spec();
  // The change is made once the call is seen waiting for one.
  std::thread later([&] {
    EXPECT_TRUE(fp::testing::WaitFor([&] { return agent_->waiting_reports() == 1; }));
    EXPECT_TRUE(client_->EnsureRunning(a));
  });
  auto began = std::chrono::steady_clock::now();
  SledReport changed = client_->Changes(now.boot_id, now.generation, milliseconds(10'000)).value();
  auto waited = std::chrono::steady_clock::now() - began;
  later.join();
  EXPECT_EQ(Ids(changed), std::vector<Uuid>{a.id});
  EXPECT_LT(waited, milliseconds(5000));

  // With nothing to report, the call ends at its wait with no change.
  ASSERT_TRUE(ReachesState(a.id, VmState::kRunning));
  SledReport quiet = client_->Changes(changed.boot_id, 0, milliseconds(0)).value();
  SledReport after = client_->Changes(quiet.boot_id, quiet.generation, milliseconds(100)).value();
  EXPECT_TRUE(after.instances.empty());
  EXPECT_EQ(after.generation, quiet.generation);
}

TEST_F(SledReportTest, APortAddressChangeIsReported) {
  InstanceSpec a = Spec();
  ASSERT_TRUE(client_->EnsureRunning(a));
  ASSERT_TRUE(ReachesState(a.id, VmState::kRunning));
  SledReport now = client_->Changes("", 0, milliseconds(0)).value();
  ASSERT_TRUE(client_->AddExternalIp(a.id, Ip("203.0.113.9")));
  // A call applied after its caller gave up (a hung agent) is repaired only through this
  // report: the caller's undo ran first.
  SledReport next = client_->Changes(now.boot_id, now.generation, milliseconds(2000)).value();
  ASSERT_EQ(Ids(next), std::vector<Uuid>{a.id});
  EXPECT_EQ(next.instances[0].external_ips, std::vector<IpAddr>{Ip("203.0.113.9")});
}

TEST_F(SledReportTest, AResetIsANewRunAndAnswersTheWholeList) {
  InstanceSpec a = Spec();
  ASSERT_TRUE(client_->EnsureRunning(a));
  ASSERT_TRUE(ReachesState(a.id, VmState::kRunning));
  SledReport before = client_->Changes("", 0, milliseconds(0)).value();
  std::optional<SledReport> woken;
  std::thread poll([&] {
    woken = client_->Changes(before.boot_id, before.generation, milliseconds(10'000)).value();
  });
  EXPECT_TRUE(fp::testing::WaitFor([&] { return agent_->waiting_reports() == 1; }));
  ASSERT_EQ(control_->Call("POST", "/reset").value().status, 200);
  poll.join();
  ASSERT_TRUE(woken);
  EXPECT_NE(woken->boot_id, before.boot_id);
  EXPECT_TRUE(woken->full);
  EXPECT_TRUE(woken->instances.empty());  // the VM went with the reset
}

TEST_F(SledReportTest, ACallerBehindTheRememberedRemovalsGetsTheWholeList) {
  SledReport start = client_->Changes("", 0, milliseconds(0)).value();
  InstanceSpec keep = Spec();
  ASSERT_TRUE(client_->EnsureRunning(keep));
  SledReport registered =
      client_->Changes(start.boot_id, start.generation, milliseconds(0)).value();
  // Unregistering a VM the sled does not hold changes nothing.
  ASSERT_TRUE(client_->Unregister(Uuid::Random()));
  EXPECT_TRUE(client_->Changes(registered.boot_id, registered.generation, milliseconds(0))
                  .value()
                  .instances.empty());
  for (size_t i = 0; i <= SledAgentDaemon::kRemovalsKept; ++i) {
    InstanceSpec gone = Spec();
    ASSERT_TRUE(client_->EnsureRunning(gone));
    ASSERT_TRUE(client_->Unregister(gone.id));
  }
  SledReport behind = client_->Changes(start.boot_id, start.generation, milliseconds(0)).value();
  EXPECT_TRUE(behind.full);
  EXPECT_EQ(Ids(behind), std::vector<Uuid>{keep.id});
}

TEST_F(SledReportTest, MalformedParametersAreRefusedNamingThem) {
  auto answer = control_->Call("GET", "/changes?since=-1").value();
  EXPECT_EQ(answer.status, 400);
  EXPECT_NE(answer.body.find("since"), std::string::npos) << answer.body;
  answer = control_->Call("GET", "/changes?wait_ms=99999999").value();
  EXPECT_EQ(answer.status, 400);
  EXPECT_NE(answer.body.find("wait_ms"), std::string::npos) << answer.body;
}

}  // namespace
}  // namespace fp::agents
