// The agent secret: agents given one obey only callers that present it (issue 24, item 6).

#include "agents/agent_secret.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "agents/agents.h"
#include "agents/daemon/sled_agent.h"
#include "agents/daemon/switch_agent.h"
#include "common/testing/wait_for.h"
#include "http/client.h"

namespace fp::agents {
namespace {

using Json = nlohmann::json;
using daemon::DaemonOptions;
using daemon::SledAgentDaemon;
using daemon::SwitchAgentDaemon;

class SecretFile {
 public:
  explicit SecretFile(const std::string& contents)
      : path_(
            std::filesystem::temp_directory_path() /
            ("fp-agent-secret-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++))) {
    std::ofstream(path_) << contents;
  }
  ~SecretFile() { std::filesystem::remove(path_); }
  std::string path() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

TEST(AgentSecret, IsTheFilesFirstLineAndAcceptsOnlyItsOwnHeader) {
  SecretFile file("  s3cret-of-some-length-0123456789 \nsecond line\n");
  auto secret = AgentSecret::ReadFile(file.path());
  ASSERT_TRUE(secret) << secret.error().message();
  EXPECT_EQ(secret->AuthorizationHeader(), "Bearer s3cret-of-some-length-0123456789");
  EXPECT_TRUE(secret->Accepts("Bearer s3cret-of-some-length-0123456789"));
  for (const char* other :
       {"", "Bearer", "Bearer s3cret-of-some-length-012345678",
        "Bearer s3cret-of-some-length-01234567890", "s3cret-of-some-length-0123456789",
        "bearer s3cret-of-some-length-0123456789"}) {
    EXPECT_FALSE(secret->Accepts(other)) << other;
  }
  EXPECT_FALSE(AgentSecret::Generate(MachineRandom()).Accepts(secret->AuthorizationHeader()));
}

TEST(AgentSecret, AFileThatCannotServeIsRefusedNamingIt) {
  SecretFile short_one("too-short\n");
  auto refused = AgentSecret::ReadFile(short_one.path());
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message(),
            "the agent secret file " + short_one.path() +
                " must hold a secret of at least 16 characters on its first line (make one "
                "with: head -c 32 /dev/urandom | base64 > " +
                short_one.path() + ")");
  auto missing = AgentSecret::ReadFile("/nonexistent/agent-secret");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().message(),
            "cannot read the agent secret file /nonexistent/agent-secret: No such file or "
            "directory");
}

// Every endpoint of both agents (their test endpoints included), called by a stranger without
// the secret or with a wrong one, is answered 401 and changes nothing; the control plane's
// calls, which present it, are served.
TEST(AgentSecret, EveryEndpointOfBothAgentsRefusesAStrangerAndNothingChanges) {
  SecretFile file("the-control-planes-secret-0123456789\n");
  AgentSecret secret = AgentSecret::ReadFile(file.path()).value();
  DaemonOptions options;
  options.secret = secret;
  auto switch_agent = SwitchAgentDaemon::Start(options).value();
  auto sled_agent = SledAgentDaemon::Start(options).value();
  auto switch_client = MakeSwitchAgentClient(switch_agent->base_url(), 2000, secret);
  auto sled_client = MakeSledAgentClient(sled_agent->base_url(), 2000, secret);

  // What a call that got through could change: a NAT entry, an instance with an address.
  const IpAddr ip = IpAddr::Parse("203.0.113.5").value();
  NatChange add{.entry = NatEntry{.external_ip = ip,
                                  .sled_address = IpAddr::Parse("fd00::1").value(),
                                  .vni = 5,
                                  .mac = "a8:40:25:00:00:01"},
                .gen = 1};
  ASSERT_TRUE(switch_client->ApplyChanges({add}));
  InstanceSpec spec{
      .id = Uuid::Random(), .vni = 5, .mac = "a8:40:25:00:00:01", .external_ips = {ip}};
  ASSERT_TRUE(sled_client->EnsureRunning(spec));
  // The VM finishes starting on its own: compare from when it runs.
  ASSERT_TRUE(fp::testing::WaitFor([&] {
    auto vm = sled_client->Get(spec.id);
    return vm && vm->state == VmState::kRunning;
  }));
  auto nat_before = switch_client->GetNat().value();
  auto instances_before = sled_client->List().value();

  const std::regex param(R"(\{[a-z_]+\})");
  int refused = 0;
  for (auto [base_url, endpoints] : {std::pair{switch_agent->base_url(), switch_agent->Endpoints()},
                                     std::pair{sled_agent->base_url(), sled_agent->Endpoints()}}) {
    ASSERT_GE(endpoints.size(), 8u) << base_url;
    for (const auto& [method, pattern] : endpoints) {
      // The real instance and address, so that an obeyed DELETE would remove them.
      std::string path = std::regex_replace(
          std::regex_replace(pattern, std::regex(R"(\{id\})"), spec.id.ToString()),
          std::regex(R"(\{ip\})"), ip.ToString());
      path = std::regex_replace(path, param, "x");
      for (const std::string& authorization :
           {std::string(), std::string("Bearer not-the-secret-at-all-0123"),
            std::string("Bearer the-control-planes-secret-012345678")}) {
        http::HttpClient stranger("agent", base_url, std::chrono::milliseconds(2000),
                                  authorization);
        std::string body = method == "GET" || method == "DELETE" ? "" : add.ToJson().dump();
        auto answer = stranger.Call(method, path, body);
        ASSERT_TRUE(answer) << answer.error().message();
        EXPECT_EQ(answer->status, 401)
            << method << " " << path << " with \"" << authorization << "\": " << answer->body;
        Json error = Json::parse(answer->body, nullptr, false);
        EXPECT_EQ(error.value("error_code", ""), "Unauthenticated") << answer->body;
        EXPECT_EQ(error.value("message", ""), std::string(kAgentSecretRefusal));
        ++refused;
      }
    }
  }
  EXPECT_GE(refused, 3 * 16);
  EXPECT_EQ(switch_client->GetNat().value(), nat_before);
  EXPECT_EQ(sled_client->List().value(), instances_before);
}

}  // namespace
}  // namespace fp::agents
