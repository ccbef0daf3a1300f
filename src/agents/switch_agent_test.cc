// The switch agent's HTTP client against the simulated switch agent: every call, and the
// semantics of the NAT change feed.

#include "agents/daemon/switch_agent.h"

#include <gtest/gtest.h>

#include <map>

#include "agents/agents.h"
#include "agents/nat_dataplane.h"
#include "common/testing/ip.h"
#include "http/client.h"

namespace fp::agents {
namespace {

using Json = nlohmann::json;
using daemon::DaemonOptions;
using daemon::SwitchAgentDaemon;
using http::HttpClient;

using fp::testing::Ip;

NatEntry Entry(std::string_view ip, int first_port, int last_port, int64_t vni = 10) {
  return NatEntry{.external_ip = Ip(ip),
                  .first_port = first_port,
                  .last_port = last_port,
                  .sled_address = Ip("fd00:1122:3344:101::1"),
                  .vni = vni,
                  .mac = "a8:40:25:00:00:01"};
}

NatChange Add(int64_t gen, NatEntry e) { return NatChange{.entry = e, .gen = gen}; }
NatChange Remove(int64_t gen, NatEntry e) {
  return NatChange{.entry = e, .gen = gen, .deleted = true};
}

class SwitchAgentTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(DaemonOptions{}); }

  void Start(const DaemonOptions& options) {
    agent_ = SwitchAgentDaemon::Start(options).value();
    client_ = MakeSwitchAgentClient(agent_->base_url(), 2000);
    control_ = std::make_unique<HttpClient>("switch agent", agent_->base_url(),
                                            std::chrono::milliseconds(2000));
  }

  void PostFault(const Json& fault) {
    auto answer = control_->Call("POST", "/faults", fault.dump());
    ASSERT_TRUE(answer) << answer.error().message();
    ASSERT_EQ(answer->status, 200) << answer->body;
  }

  std::unique_ptr<SwitchAgentDaemon> agent_;
  std::unique_ptr<SwitchAgentClient> client_;
  std::unique_ptr<HttpClient> control_;
};

TEST_F(SwitchAgentTest, FreshAgentHasAnEmptyTableAtGenerationZero) {
  NatTable table = client_->GetNat().value();
  EXPECT_EQ(table.generation, 0);
  EXPECT_TRUE(table.entries.empty());
  EXPECT_EQ(client_->address(), agent_->base_url());
}

TEST_F(SwitchAgentTest, GetNatAnswersTheInspectionFormatOtherToolsRead) {
  ASSERT_TRUE(client_->ApplyChanges({Add(1, Entry("203.0.113.5", 0, 16383, 77))}));
  auto answer = control_->Call("GET", "/nat");
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 200);
  EXPECT_EQ(Json::parse(answer->body), Json::parse(R"({"generation": 1, "entries": [
      {"external_ip": "203.0.113.5", "first_port": 0, "last_port": 16383,
       "sled_address": "fd00:1122:3344:101::1", "vni": 77, "mac": "a8:40:25:00:00:01"}]})"));
}

TEST_F(SwitchAgentTest, ApplyChangesInstallsInOrderAndListsSortedByAddressThenPort) {
  auto generation = client_->ApplyChanges(
      {Add(1, Entry("203.0.113.9", 0, 65535)), Add(2, Entry("203.0.113.5", 16384, 32767)),
       Add(3, Entry("203.0.113.5", 0, 16383)), Add(4, Entry("2001:db8::1", 0, 65535))});
  ASSERT_TRUE(generation) << generation.error().message();
  EXPECT_EQ(*generation, 4);
  NatTable table = client_->GetNat().value();
  EXPECT_EQ(table.generation, 4);
  EXPECT_EQ(table.entries, (std::vector<NatEntry>{
                               Entry("203.0.113.5", 0, 16383), Entry("203.0.113.5", 16384, 32767),
                               Entry("203.0.113.9", 0, 65535), Entry("2001:db8::1", 0, 65535)}));
  EXPECT_EQ(agent_->Nat(), table);
}

TEST_F(SwitchAgentTest, ReapplyingTheSameChangesIsIdempotent) {
  std::vector<NatChange> changes = {Add(1, Entry("203.0.113.5", 0, 65535)),
                                    Remove(2, Entry("203.0.113.5", 0, 65535)),
                                    Add(3, Entry("203.0.113.6", 0, 65535))};
  EXPECT_EQ(client_->ApplyChanges(changes).value(), 3);
  NatTable once = client_->GetNat().value();
  EXPECT_EQ(client_->ApplyChanges(changes).value(), 3);
  EXPECT_EQ(client_->GetNat().value(), once);
  // A change at or below the generation is never applied again, even a removal.
  EXPECT_EQ(client_->ApplyChanges({Remove(3, Entry("203.0.113.6", 0, 65535))}).value(), 3);
  EXPECT_EQ(client_->GetNat().value().entries.size(), 1u);
}

TEST_F(SwitchAgentTest, AnAdditionReplacesOverlappingEntriesOfTheSameAddressOnly) {
  ASSERT_TRUE(client_->ApplyChanges(
      {Add(1, Entry("203.0.113.5", 0, 16383)), Add(2, Entry("203.0.113.5", 16384, 32767)),
       Add(3, Entry("203.0.113.5", 49152, 65535)), Add(4, Entry("203.0.113.6", 0, 65535))}));
  // Overlaps the first two blocks of .5, not the last one nor .6.
  ASSERT_TRUE(client_->ApplyChanges({Add(5, Entry("203.0.113.5", 100, 20000, 99))}));
  EXPECT_EQ(
      client_->GetNat().value().entries,
      (std::vector<NatEntry>{Entry("203.0.113.5", 100, 20000, 99),
                             Entry("203.0.113.5", 49152, 65535), Entry("203.0.113.6", 0, 65535)}));
}

TEST_F(SwitchAgentTest, ADeletionRemovesOnlyTheExactEntryAndAMissingOneIsFine) {
  ASSERT_TRUE(client_->ApplyChanges({Add(1, Entry("203.0.113.5", 0, 16383))}));
  // Same address and first port, another last port: not this entry.
  EXPECT_EQ(client_->ApplyChanges({Remove(2, Entry("203.0.113.5", 0, 65535))}).value(), 2);
  EXPECT_EQ(client_->GetNat().value().entries.size(), 1u);
  EXPECT_EQ(client_->ApplyChanges({Remove(3, Entry("198.51.100.1", 0, 65535))}).value(), 3);
  EXPECT_EQ(client_->ApplyChanges({Remove(4, Entry("203.0.113.5", 0, 16383))}).value(), 4);
  NatTable table = client_->GetNat().value();
  EXPECT_TRUE(table.entries.empty());
  EXPECT_EQ(table.generation, 4);
}

TEST_F(SwitchAgentTest, GenerationNeverPassesAChangeThatFailed) {
  ASSERT_TRUE(client_->ApplyChanges({Add(1, Entry("203.0.113.5", 0, 65535))}));
  PostFault({{"endpoint", "POST /nat/changes"}, {"fail_next", 1}});
  auto failed = client_->ApplyChanges({Add(2, Entry("203.0.113.6", 0, 65535))});
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().kind(), ErrorKind::kServiceUnavailable);
  EXPECT_EQ(failed.error().message().rfind("switch agent at " + agent_->base_url() + ": ", 0), 0u)
      << failed.error().message();
  EXPECT_NE(failed.error().message().find("fail_next"), std::string::npos);
  NatTable table = client_->GetNat().value();
  EXPECT_EQ(table.generation, 1);
  EXPECT_EQ(table.entries.size(), 1u);
  // The fault is spent: the retry installs the change.
  EXPECT_EQ(client_->ApplyChanges({Add(2, Entry("203.0.113.6", 0, 65535))}).value(), 2);
}

TEST_F(SwitchAgentTest, StopsAtTheFirstChangeItCannotInstall) {
  Start(DaemonOptions{.nat_capacity = 2});
  std::vector<NatChange> changes = {
      Add(1, Entry("203.0.113.5", 0, 65535)), Add(2, Entry("203.0.113.6", 0, 65535)),
      Add(3, Entry("203.0.113.7", 0, 65535)), Remove(4, Entry("203.0.113.5", 0, 65535))};
  EXPECT_EQ(client_->ApplyChanges(changes).value(), 2);
  auto answer =
      control_->Call("POST", "/nat/changes", Json{{"changes", {changes[2].ToJson()}}}.dump());
  ASSERT_TRUE(answer);
  Json body = Json::parse(answer->body);
  EXPECT_EQ(body["generation"], 2);
  EXPECT_EQ(body["failed_gen"], 3);
  EXPECT_NE(body["message"].get<std::string>().find("table is full"), std::string::npos);
  // Replacing an overlapping entry does not need room.
  EXPECT_EQ(client_->ApplyChanges({Add(3, Entry("203.0.113.6", 0, 100))}).value(), 3);
}

// A switch failing part way through a batch, until the faults are cleared: it answers as for a
// change it cannot install (the generation it reached, and failed_gen).
TEST_F(SwitchAgentTest, AnApplyFirstFaultInstallsOnlyTheStartOfEachBatchUntilCleared) {
  PostFault({{"endpoint", "POST /nat/changes"}, {"apply_first", 1}});
  std::vector<NatChange> changes = {Add(1, Entry("203.0.113.5", 0, 65535)),
                                    Add(2, Entry("203.0.113.6", 0, 65535)),
                                    Add(3, Entry("203.0.113.7", 0, 65535))};
  // Each call installs the first change it carries; a resend from the failed change advances
  // one more.
  for (int64_t reached = 1; reached <= 2; ++reached) {
    Json batch = Json::array();
    for (size_t i = static_cast<size_t>(reached) - 1; i < changes.size(); ++i) {
      batch.push_back(changes[i].ToJson());
    }
    auto answer = control_->Call("POST", "/nat/changes", Json{{"changes", batch}}.dump());
    ASSERT_TRUE(answer);
    ASSERT_EQ(answer->status, 200) << answer->body;
    Json body = Json::parse(answer->body);
    EXPECT_EQ(body["generation"], reached);
    EXPECT_EQ(body["failed_gen"], reached + 1);
    EXPECT_NE(body["message"].get<std::string>().find("apply_first"), std::string::npos);
  }
  EXPECT_EQ(client_->GetNat().value().entries.size(), 2u);
  ASSERT_TRUE(control_->Call("DELETE", "/faults"));
  EXPECT_EQ(client_->ApplyChanges(changes).value(), 3);
  EXPECT_EQ(client_->GetNat().value().entries.size(), 3u);
}

// A conditional replacement (a repair judged on the table at one generation) is refused once
// the table moved on, and changes nothing then.
TEST_F(SwitchAgentTest, ReplaceAllIfReplacesOnlyAtTheGenerationGiven) {
  ASSERT_TRUE(client_->ApplyChanges({Add(1, Entry("198.51.100.1", 0, 65535))}));
  NatTable before = client_->GetNat().value();
  NatTable desired{.generation = 5, .entries = {Entry("203.0.113.5", 0, 16383)}};
  EXPECT_EQ(client_->ReplaceAllIf(desired, 0).value(), std::nullopt);
  EXPECT_EQ(client_->GetNat().value(), before);
  EXPECT_EQ(client_->ReplaceAllIf(desired, 1).value(), std::optional<int64_t>(5));
  EXPECT_EQ(client_->GetNat().value(), desired);
}

TEST_F(SwitchAgentTest, ReplaceAllReplacesTheTableAndSetsTheGeneration) {
  ASSERT_TRUE(client_->ApplyChanges({Add(1, Entry("198.51.100.1", 0, 65535))}));
  NatTable desired{.generation = 7,
                   .entries = {Entry("203.0.113.6", 0, 65535), Entry("203.0.113.5", 0, 16383)}};
  EXPECT_EQ(client_->ReplaceAll(desired).value(), 7);
  NatTable table = client_->GetNat().value();
  EXPECT_EQ(table.generation, 7);
  EXPECT_EQ(table.entries, (std::vector<NatEntry>{Entry("203.0.113.5", 0, 16383),
                                                  Entry("203.0.113.6", 0, 65535)}));
  EXPECT_EQ(client_->ReplaceAll(desired).value(), 7);
  EXPECT_EQ(client_->GetNat().value(), table);
  // The feed continues from the replaced generation.
  EXPECT_EQ(client_
                ->ApplyChanges({Remove(7, Entry("203.0.113.6", 0, 65535)),
                                Remove(8, Entry("203.0.113.5", 0, 16383))})
                .value(),
            8);
  EXPECT_EQ(client_->GetNat().value().entries.size(), 1u);
}

TEST_F(SwitchAgentTest, ResetLosesTheTableAndTheGenerationAndAReplayConverges) {
  std::vector<NatChange> changes = {Add(1, Entry("203.0.113.5", 0, 65535)),
                                    Add(2, Entry("203.0.113.6", 0, 65535)),
                                    Remove(3, Entry("203.0.113.5", 0, 65535))};
  ASSERT_EQ(client_->ApplyChanges(changes).value(), 3);
  NatTable before = client_->GetNat().value();
  auto reset = control_->Call("POST", "/reset");
  ASSERT_TRUE(reset);
  EXPECT_EQ(reset->status, 200);
  NatTable after = client_->GetNat().value();
  EXPECT_EQ(after.generation, 0);
  EXPECT_TRUE(after.entries.empty());
  EXPECT_EQ(client_->ApplyChanges(changes).value(), 3);
  EXPECT_EQ(client_->GetNat().value(), before);
}

TEST_F(SwitchAgentTest, MalformedChangesAreRefusedNamingTheField) {
  Json change = Add(1, Entry("203.0.113.5", 0, 65535)).ToJson();
  change["entry"]["last_port"] = 65536;
  auto answer = control_->Call("POST", "/nat/changes", Json{{"changes", {change}}}.dump());
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 400);
  EXPECT_NE(Json::parse(answer->body)["message"].get<std::string>().find(
                "field \"changes[0].entry.last_port\""),
            std::string::npos)
      << answer->body;
  EXPECT_EQ(client_->GetNat().value().generation, 0);
  EXPECT_EQ(control_->Call("POST", "/nat/changes", "{").value().status, 400);
  EXPECT_EQ(control_->Call("GET", "/nothing").value().status, 404);
}

}  // namespace
}  // namespace fp::agents

namespace fp::agents {
namespace {

// A dataplane that takes what it is given, or refuses everything once told to.
class RecordingDataplane final : public NatDataplane {
 public:
  Status Check(const NatEntry& e) const override {
    if (e.first_port == 1) return Fail(Error::InvalidRequest("ports from 1 are not held here"));
    return Ok();
  }
  Status Apply(const std::vector<NatEntry>& removed,
               const std::vector<NatEntry>& installed) override {
    if (refuse) return Fail(Error::Internal("the kernel said no"));
    for (const NatEntry& e : removed) held.erase(e.external_ip.ToString());
    for (const NatEntry& e : installed) held[e.external_ip.ToString()] = e;
    last_removed = removed;
    last_installed = installed;
    ++batches;
    return Ok();
  }
  Status ReplaceAll(const std::vector<NatEntry>& entries) override {
    if (refuse) return Fail(Error::Internal("the kernel said no"));
    held.clear();
    for (const NatEntry& e : entries) held[e.external_ip.ToString()] = e;
    return Ok();
  }
  bool refuse = false;
  int batches = 0;
  std::vector<NatEntry> last_removed, last_installed;
  std::map<std::string, NatEntry> held;
};

TEST(SwitchAgentWithADataplane, EachRequestIsOneStepThereAndARefusalChangesNothing) {
  auto owned = std::make_unique<RecordingDataplane>();
  RecordingDataplane* dataplane = owned.get();
  auto agent = SwitchAgentDaemon::Start(DaemonOptions{}, std::move(owned)).value();
  auto client = MakeSwitchAgentClient(agent->base_url(), 2000);
  ASSERT_EQ(client
                ->ApplyChanges({Add(1, Entry("203.0.113.1", 0, 65535)),
                                Add(2, Entry("203.0.113.2", 0, 65535)),
                                Remove(3, Entry("203.0.113.1", 0, 65535))})
                .value(),
            3);
  EXPECT_EQ(dataplane->batches, 1) << "one request, one step";
  EXPECT_EQ(dataplane->held.size(), 1u);
  EXPECT_EQ(dataplane->held.count("203.0.113.2"), 1u) << "added then removed: never sent";

  dataplane->refuse = true;
  auto refused = client->ApplyChanges({Add(4, Entry("203.0.113.3", 0, 65535))});
  EXPECT_EQ(refused.value(), 3) << "the generation stays where it was";
  NatTable after = client->GetNat().value();
  EXPECT_EQ(after.generation, 3);
  EXPECT_EQ(after.entries, std::vector<NatEntry>{Entry("203.0.113.2", 0, 65535)});
  EXPECT_FALSE(client->ReplaceAll(NatTable{9, {}}));
  EXPECT_EQ(client->GetNat().value().generation, 3);

  dataplane->refuse = false;
  // An entry the dataplane cannot hold stops the request before it, like a full table.
  EXPECT_EQ(client
                ->ApplyChanges({Add(4, Entry("203.0.113.4", 0, 65535)),
                                Add(5, Entry("203.0.113.5", 1, 65535))})
                .value(),
            4);
  EXPECT_EQ(dataplane->held.count("203.0.113.4"), 1u);
  EXPECT_EQ(dataplane->held.count("203.0.113.5"), 0u);
}

// A bucket repair reaches the dataplane as what it changed, in one step; refused there, it
// changes nothing (table, digest, generation).
TEST(SwitchAgentWithADataplane, ABucketRepairTakesOnlyWhatChangedThereInOneStep) {
  auto owned = std::make_unique<RecordingDataplane>();
  RecordingDataplane* dataplane = owned.get();
  auto agent = SwitchAgentDaemon::Start(DaemonOptions{}, std::move(owned)).value();
  auto client = MakeSwitchAgentClient(agent->base_url(), 2000);
  const NatEntry kept = Entry("203.0.113.1", 0, 65535), lost = Entry("203.0.113.2", 0, 65535);
  ASSERT_EQ(client->ReplaceAll(NatTable{4, {kept}}).value(), 4);
  const NatStatus before = agent->CurrentStatus();
  // One bucket: everything is listed.
  NatReplaceWriter writer;
  writer.Add(kept);
  writer.Add(lost);
  const std::string body =
      std::move(writer).FinishBuckets(1, {0}, 5, client->GetNatBuckets(1).value());

  dataplane->refuse = true;
  EXPECT_FALSE(client->RepairBucketsWritten(body));
  EXPECT_EQ(agent->CurrentStatus(), before);
  EXPECT_EQ(agent->Nat(), (NatTable{4, {kept}}));

  dataplane->refuse = false;
  const int batches = dataplane->batches;
  NatBucketsRepaired repaired = client->RepairBucketsWritten(body).value();
  EXPECT_EQ(repaired.added, 1);
  EXPECT_EQ(repaired.changed + repaired.removed, 0);
  EXPECT_EQ(dataplane->batches, batches + 1);
  EXPECT_EQ(dataplane->last_installed, std::vector<NatEntry>{lost}) << "only what changed";
  EXPECT_TRUE(dataplane->last_removed.empty());
  EXPECT_EQ(dataplane->held.size(), 2u);
  EXPECT_EQ(agent->CurrentStatus().digest, NatEntryHash(kept) + NatEntryHash(lost));
}

}  // namespace
}  // namespace fp::agents
