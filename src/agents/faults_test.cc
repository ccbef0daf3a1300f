// Fault injection on the simulated agents, and how the HTTP clients report each failure:
// refused calls, applied-then-failed calls, delays, hangs, timeouts, lost state, unreachable
// agents.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "agents/agents.h"
#include "agents/daemon/sled_agent.h"
#include "agents/daemon/switch_agent.h"
#include "common/testing/ip.h"
#include "common/testing/wait_for.h"
#include "http/client.h"
#include "http/server.h"

namespace fp::agents {
namespace {

using Json = nlohmann::json;
using daemon::DaemonOptions;
using daemon::SledAgentDaemon;
using daemon::SwitchAgentDaemon;
using fp::testing::WaitFor;
using http::HttpClient;
using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

using fp::testing::Ip;

NatChange Add(int64_t gen, std::string_view ip) {
  return NatChange{.entry = NatEntry{.external_ip = Ip(ip),
                                     .sled_address = Ip("fd00::1"),
                                     .vni = 5,
                                     .mac = "a8:40:25:00:00:01"},
                   .gen = gen};
}

// The test-control side of an agent: its fault and reset endpoints, over HTTP.
class AgentControl {
 public:
  explicit AgentControl(const std::string& base_url)
      : http_("agent control", base_url, milliseconds(2000)) {}

  Json Call(std::string_view method, std::string_view path, const Json& body = nullptr) {
    auto answer = http_.Call(method, path, body.is_null() ? "" : body.dump());
    EXPECT_TRUE(answer) << answer.error().message();
    if (!answer) return nullptr;
    last_status_ = answer->status;
    return answer->body.empty() ? Json(nullptr) : Json::parse(answer->body);
  }
  void AddFault(const Json& fault) {
    Call("POST", "/faults", fault);
    EXPECT_EQ(last_status_, 200);
  }
  int HeldCalls() { return Call("GET", "/faults")["held_calls"].get<int>(); }
  int last_status() const { return last_status_; }

 private:
  HttpClient http_;
  int last_status_ = 0;
};

// An agent not started for tests (the binary without --enable-test-faults) has no fault or
// reset endpoints: they answer 404 and change nothing.
TEST(ProductionAgent, AnswersTheTestFaultEndpoints404) {
  DaemonOptions options;
  options.test_faults = false;
  auto sled = SledAgentDaemon::Start(options).value();
  AgentControl control(sled->base_url());
  for (auto [method, path] : {std::pair{"GET", "/faults"}, std::pair{"POST", "/faults"},
                              std::pair{"DELETE", "/faults"}, std::pair{"POST", "/reset"}}) {
    control.Call(method, path,
                 std::string_view(method) == "POST" && std::string_view(path) == "/faults"
                     ? Json{{"endpoint", "*"}, {"fail_next", 1}}
                     : Json(nullptr));
    EXPECT_EQ(control.last_status(), 404) << method << " " << path;
  }
  EXPECT_TRUE(MakeSledAgentClient(sled->base_url(), 2000)->List()) << "a fault was added";
}

class FaultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    switch_agent_ = SwitchAgentDaemon::Start(DaemonOptions{}).value();
    sled_agent_ = SledAgentDaemon::Start(DaemonOptions{}).value();
    switch_control_ = std::make_unique<AgentControl>(switch_agent_->base_url());
    sled_control_ = std::make_unique<AgentControl>(sled_agent_->base_url());
  }

  std::unique_ptr<SwitchAgentClient> SwitchClient(int timeout_ms = 2000) {
    return MakeSwitchAgentClient(switch_agent_->base_url(), timeout_ms);
  }
  std::unique_ptr<SledAgentClient> SledClient(int timeout_ms = 2000) {
    return MakeSledAgentClient(sled_agent_->base_url(), timeout_ms);
  }

  std::unique_ptr<SwitchAgentDaemon> switch_agent_;
  std::unique_ptr<SledAgentDaemon> sled_agent_;
  std::unique_ptr<AgentControl> switch_control_;
  std::unique_ptr<AgentControl> sled_control_;
};

TEST_F(FaultsTest, FaultsAreListedReplacedPerEndpointAndCleared) {
  switch_control_->AddFault({{"endpoint", "POST /nat/changes"}, {"fail_next", 2}});
  switch_control_->AddFault({{"endpoint", "GET /nat"}, {"delay_ms", 10}});
  switch_control_->AddFault({{"endpoint", "POST /nat/changes"}, {"apply_then_fail", 1}});
  Json listed = switch_control_->Call("GET", "/faults");
  ASSERT_EQ(listed["faults"].size(), 2u);
  EXPECT_EQ(listed["faults"][0], Json::parse(R"({"endpoint": "POST /nat/changes", "fail_next": 0,
      "apply_then_fail": 1, "delay_ms": 0, "hang": false})"));
  EXPECT_EQ(listed["held_calls"], 0);
  EXPECT_TRUE(switch_control_->Call("DELETE", "/faults")["faults"].empty());
  EXPECT_TRUE(switch_control_->Call("GET", "/faults")["faults"].empty());
}

TEST_F(FaultsTest, MalformedFaultsAreRefusedNamingTheProblem) {
  for (const Json& bad :
       {Json{{"fail_next", 1}}, Json{{"endpoint", "/nat"}, {"fail_next", 1}},
        Json{{"endpoint", "GET /nat"}, {"fail_next", -1}},
        Json{{"endpoint", "GET /nat"}, {"hang", "yes"}}, Json{{"endpoint", "GET /nat"}}}) {
    Json answer = switch_control_->Call("POST", "/faults", bad);
    EXPECT_EQ(switch_control_->last_status(), 400) << bad.dump();
    EXPECT_FALSE(answer["message"].get<std::string>().empty());
  }
  EXPECT_TRUE(switch_control_->Call("GET", "/faults")["faults"].empty());
}

TEST_F(FaultsTest, FailNextRefusesTheNextCallsWithoutHandlingThem) {
  auto client = SledClient();
  InstanceSpec spec{.id = Uuid::Random()};
  ASSERT_TRUE(client->EnsureRunning(spec));
  sled_control_->AddFault({{"endpoint", "PUT /instances/*/external-ips/*"}, {"fail_next", 2}});
  for (int i = 0; i < 2; ++i) {
    auto refused = client->AddExternalIp(spec.id, Ip("198.51.100.1"));
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().kind(), ErrorKind::kServiceUnavailable);
    EXPECT_EQ(refused.error().message().rfind("sled agent at " + sled_agent_->base_url(), 0), 0u);
    EXPECT_TRUE(sled_agent_->Instance(spec.id)->external_ips.empty());
  }
  // Other endpoints are not affected, and the third call goes through.
  EXPECT_TRUE(client->Get(spec.id));
  EXPECT_TRUE(client->AddExternalIp(spec.id, Ip("198.51.100.1")));
  EXPECT_EQ(sled_agent_->Instance(spec.id)->external_ips, std::vector<IpAddr>{Ip("198.51.100.1")});
  EXPECT_TRUE(sled_control_->Call("GET", "/faults")["faults"].empty());
}

TEST_F(FaultsTest, ApplyThenFailChangesTheStateButAnswers503) {
  auto sled = SledClient();
  InstanceSpec spec{.id = Uuid::Random()};
  sled_control_->AddFault({{"endpoint", "PUT /instances/*"}, {"apply_then_fail", 1}});
  auto started = sled->EnsureRunning(spec);
  ASSERT_FALSE(started);
  EXPECT_EQ(started.error().kind(), ErrorKind::kServiceUnavailable);
  EXPECT_NE(started.error().message().find("apply_then_fail"), std::string::npos);
  EXPECT_TRUE(sled_agent_->Instance(spec.id).has_value());

  auto nat = SwitchClient();
  switch_control_->AddFault({{"endpoint", "POST /nat/changes"}, {"apply_then_fail", 1}});
  auto applied = nat->ApplyChanges({Add(1, "203.0.113.5")});
  ASSERT_FALSE(applied);
  EXPECT_EQ(applied.error().kind(), ErrorKind::kServiceUnavailable);
  EXPECT_EQ(switch_agent_->Nat().generation, 1);
  EXPECT_EQ(switch_agent_->Nat().entries.size(), 1u);
  // The caller's retry is harmless: the change is already applied.
  EXPECT_EQ(nat->ApplyChanges({Add(1, "203.0.113.5")}).value(), 1);
}

TEST_F(FaultsTest, ADelayHoldsEachMatchingCallAndCanExceedTheClientTimeout) {
  constexpr milliseconds kDelay(250);
  switch_control_->AddFault({{"endpoint", "GET /nat"}, {"delay_ms", kDelay.count()}});
  auto begin = SteadyClock::now();
  EXPECT_TRUE(SwitchClient()->GetNat());
  EXPECT_GE(SteadyClock::now() - begin, kDelay);

  auto impatient = SwitchClient(50);
  auto late = impatient->GetNat();
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error().kind(), ErrorKind::kServiceUnavailable);
  EXPECT_NE(late.error().message().find("did not answer within 50 ms"), std::string::npos);
}

TEST_F(FaultsTest, AHangTimesOutWithAMessageNamingTheAgent) {
  switch_control_->AddFault({{"endpoint", "*"}, {"hang", true}});
  auto client = SwitchClient(300);
  auto begin = SteadyClock::now();
  auto hung = client->GetNat();
  auto elapsed = SteadyClock::now() - begin;
  ASSERT_FALSE(hung);
  EXPECT_EQ(hung.error().kind(), ErrorKind::kServiceUnavailable);
  EXPECT_EQ(hung.error().message(),
            "switch agent at " + switch_agent_->base_url() + " did not answer within 300 ms");
  EXPECT_GE(elapsed, milliseconds(300));
  EXPECT_LT(elapsed, milliseconds(1000));
  // The agent still holds the call; the control endpoints are never held.
  EXPECT_TRUE(WaitFor([&] { return switch_control_->HeldCalls() == 1; }));
}

TEST_F(FaultsTest, ClearingTheFaultsReleasesAHeldCall) {
  auto client = SledClient(10000);
  InstanceSpec spec{.id = Uuid::Random()};
  sled_control_->AddFault({{"endpoint", "PUT /instances/*"}, {"hang", true}});
  auto call = std::async(std::launch::async, [&] { return client->EnsureRunning(spec); });
  ASSERT_TRUE(WaitFor([&] { return sled_control_->HeldCalls() == 1; }));
  EXPECT_FALSE(sled_agent_->Instance(spec.id).has_value());
  sled_control_->Call("DELETE", "/faults");
  auto released = call.get();
  ASSERT_TRUE(released) << released.error().message();
  EXPECT_EQ(released->state, VmState::kStarting);
  EXPECT_TRUE(sled_agent_->Instance(spec.id).has_value());
}

TEST_F(FaultsTest, AHeldCallDoesNotBlockTheAgentFromStopping) {
  auto client = SledClient(10000);
  sled_control_->AddFault({{"endpoint", "GET /instances"}, {"hang", true}});
  auto call = std::async(std::launch::async, [&] { return client->List(); });
  ASSERT_TRUE(WaitFor([&] { return sled_control_->HeldCalls() == 1; }));
  auto begin = SteadyClock::now();
  sled_agent_->Stop();
  EXPECT_LT(SteadyClock::now() - begin, std::chrono::seconds(3));
  auto refused = call.get();
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().kind(), ErrorKind::kServiceUnavailable);
}

TEST_F(FaultsTest, TheWildcardSparesTheControlEndpoints) {
  switch_control_->AddFault({{"endpoint", "*"}, {"fail_next", 5}});
  switch_control_->Call("GET", "/faults");
  EXPECT_EQ(switch_control_->last_status(), 200);
  switch_control_->Call("POST", "/reset");
  EXPECT_EQ(switch_control_->last_status(), 200);
  EXPECT_EQ(switch_control_->Call("GET", "/faults")["faults"][0]["fail_next"], 5);
  EXPECT_EQ(SwitchClient()->GetNat().error().kind(), ErrorKind::kServiceUnavailable);
}

TEST_F(FaultsTest, ResetLosesAgentStateButKeepsTheFaults) {
  auto nat = SwitchClient();
  ASSERT_TRUE(nat->ApplyChanges({Add(1, "203.0.113.5")}));
  auto sled = SledClient();
  ASSERT_TRUE(sled->EnsureRunning(InstanceSpec{.id = Uuid::Random()}));
  switch_control_->AddFault({{"endpoint", "GET /nat"}, {"fail_next", 1}});
  switch_control_->Call("POST", "/reset");
  sled_control_->Call("POST", "/reset");
  EXPECT_FALSE(nat->GetNat());
  NatTable table = nat->GetNat().value();
  EXPECT_EQ(table.generation, 0);
  EXPECT_TRUE(table.entries.empty());
  EXPECT_TRUE(sled->List().value().empty());
}

TEST_F(FaultsTest, AnAgentThatIsNotListeningIsUnavailableNamedWithItsAddress) {
  std::string url = sled_agent_->base_url();
  sled_agent_->Stop();
  auto client = MakeSledAgentClient(url, 2000);
  auto refused = client->List();
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().kind(), ErrorKind::kServiceUnavailable);
  EXPECT_EQ(refused.error().message().rfind("sled agent at " + url + ": cannot connect", 0), 0u)
      << refused.error().message();
}

// A port change is done when the sled says so by its status: the view of the VM it answers with
// is not read (it was parsed and thrown away, a JSON parse per attach and per detach), so a
// body in another shape fails nothing; a refusal still fails, quoting the body.
TEST(SledPortChangeTest, IsDoneOnAnyTwoHundredWhateverTheBodyAndFailsOnARefusal) {
  std::atomic<int> status{200};
  auto sled = http::HttpServer::Start({}, [&](const http::HttpRequest&) {
                return http::HttpResponse{.status = status.load(), .body = "not json"};
              }).value();
  auto client = MakeSledAgentClient(fmt::format("http://127.0.0.1:{}", sled->port()), 2000);
  const Uuid id = Uuid::Random();
  const IpAddr ip = Ip("203.0.113.7");
  for (int ok : {200, 202, 204}) {
    status = ok;
    EXPECT_TRUE(client->AddExternalIp(id, ip)) << ok;
    EXPECT_TRUE(client->RemoveExternalIp(id, ip)) << ok;
    EXPECT_TRUE(client->StartExternalIpChange(true, id, ip, {})->Finish()) << ok;
  }
  status = 503;
  Status refused = client->StartExternalIpChange(false, id, ip, {})->Finish();
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().kind(), ErrorKind::kServiceUnavailable);
  EXPECT_NE(
      refused.error().message().find(fmt::format(
          "DELETE /instances/{}/external-ips/203.0.113.7 answered 503: not json", id.ToString())),
      std::string::npos)
      << refused.error().message();
}

TEST_F(FaultsTest, AMalformedAgentAddressIsAnInternalErrorOnEveryCall) {
  for (std::string url :
       {"127.0.0.1:80", "http://", "http://host:99999", "https://h:1", "http://h:1/path"}) {
    auto result = MakeSwitchAgentClient(url, 100)->GetNat();
    ASSERT_FALSE(result) << url;
    EXPECT_EQ(result.error().kind(), ErrorKind::kInternal) << url;
    EXPECT_NE(result.error().message().find("switch agent at " + url), std::string::npos);
  }
}

TEST_F(FaultsTest, TheClientReconnectsAfterTheAgentRestartsOnTheSamePort) {
  auto client = SwitchClient();
  ASSERT_TRUE(client->ApplyChanges({Add(1, "203.0.113.5")}));
  uint16_t port = switch_agent_->port();
  switch_agent_->Stop();
  switch_agent_ = SwitchAgentDaemon::Start(DaemonOptions{.port = port}).value();
  // The kept-alive connection was closed by the old agent; the call goes through on a new one,
  // to an agent that lost its state.
  auto table = client->GetNat();
  ASSERT_TRUE(table) << table.error().message();
  EXPECT_EQ(table->generation, 0);
}

// A call that reaches an agent while it is still starting (the server retrying against an agent
// restarted on its port) is served like any other: its handlers reach only what the agent made
// before it listened. ThreadSanitizer found a worker reading the agent's pointer to its HTTP
// front (for the fault injector) while Start was still assigning it (e2e test_recovery.py).
TEST_F(FaultsTest, CallsArrivingWhileAnAgentStartsOnItsPortAreServed) {
  const uint16_t port = switch_agent_->port();
  switch_agent_->Stop();
  std::atomic<bool> done{false};
  std::atomic<int> served{0};
  std::thread caller([&] {
    auto client = MakeSwitchAgentClient(fmt::format("http://127.0.0.1:{}", port), 1000);
    while (!done) {
      if (client->GetNat() && client->ApplyChanges({Add(1, "203.0.113.5")})) ++served;
    }
  });
  for (int restart = 0; restart < 20; ++restart) {
    const int before = served;
    switch_agent_ = SwitchAgentDaemon::Start(DaemonOptions{.port = port}).value();
    ASSERT_TRUE(WaitFor([&] { return served > before; })) << "restart " << restart;
    switch_agent_->Stop();
  }
  done = true;
  caller.join();
}

TEST_F(FaultsTest, ConcurrentCallsUseSeparateConnections) {
  auto client = SledClient(5000);
  sled_control_->AddFault({{"endpoint", "GET /instances"}, {"delay_ms", 100}});
  auto begin = SteadyClock::now();
  std::vector<std::future<Result<std::vector<SledInstance>>>> calls;
  for (int i = 0; i < 8; ++i) {
    calls.push_back(std::async(std::launch::async, [&] { return client->List(); }));
  }
  for (auto& call : calls) EXPECT_TRUE(call.get());
  // Eight delayed calls in parallel, not one after the other (which takes 800 ms).
  EXPECT_LT(SteadyClock::now() - begin, milliseconds(700));
}

}  // namespace
}  // namespace fp::agents
