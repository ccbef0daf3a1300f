// A switch's NAT table in buckets (GET and POST /nat/buckets): the wire types, and the
// simulated switch agent's answers over HTTP.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "agents/agents.h"
#include "agents/daemon/switch_agent.h"
#include "common/testing/ip.h"
#include "http/client.h"

namespace fp::agents {
namespace {

using Json = nlohmann::json;
using daemon::DaemonOptions;
using daemon::SwitchAgentDaemon;
using fp::testing::Ip;

NatEntry Entry(int n, int64_t vni = 10) {
  return NatEntry{.external_ip = Ip(fmt::format("10.0.{}.{}", n / 256, n % 256)),
                  .first_port = 0,
                  .last_port = 65535,
                  .sled_address = Ip("fd00:1122:3344:101::1"),
                  .vni = vni,
                  .mac = "a8:40:25:00:00:01"};
}

std::vector<NatEntry> Entries(int from, int to) {
  std::vector<NatEntry> out;
  for (int n = from; n <= to; ++n) out.push_back(Entry(n));
  return out;
}

// The entries of `all` in `buckets` (of `count`).
std::vector<NatEntry> InBuckets(const std::vector<NatEntry>& all, uint32_t count,
                                const std::set<uint32_t>& buckets) {
  std::vector<NatEntry> out;
  for (const NatEntry& e : all) {
    if (buckets.count(NatEntryBucket(e, count)) != 0) out.push_back(e);
  }
  return out;
}

std::string RepairBody(uint32_t count, const std::set<uint32_t>& buckets,
                       const std::vector<NatEntry>& entries, int64_t generation,
                       const NatBuckets& compared) {
  NatReplaceWriter writer;
  for (const NatEntry& e : entries) writer.Add(e);
  return std::move(writer).FinishBuckets(count, {buckets.begin(), buckets.end()}, generation,
                                         compared);
}

TEST(NatEntryBucket, DependsOnTheKeyOnlyAndSpreadsATable) {
  constexpr uint32_t kCount = 64;
  NatEntry e = Entry(7);
  NatEntry retargeted = Entry(7, 99);
  retargeted.last_port = 16383;
  EXPECT_EQ(NatEntryBucket(e, kCount), NatEntryBucket(retargeted, kCount));
  std::vector<int> sizes(kCount, 0);
  for (const NatEntry& x : Entries(0, 4095)) ++sizes[NatEntryBucket(x, kCount)];
  // 64 entries each on average: none empty, none with four times its share.
  EXPECT_GT(*std::min_element(sizes.begin(), sizes.end()), 0);
  EXPECT_LT(*std::max_element(sizes.begin(), sizes.end()), 256);
}

TEST(NatBucketsJson, RoundTripsAndNamesBadFields) {
  std::vector<NatEntry> entries = Entries(0, 39);
  NatBuckets b = NatBuckets::Of(entries, 8);
  b.boot_id = "run-1";
  b.generation = 3;
  EXPECT_EQ(std::accumulate(b.entries.begin(), b.entries.end(), int64_t{0}), 40);
  uint64_t digest = 0;
  for (const NatEntry& e : entries) digest += NatEntryHash(e);
  EXPECT_EQ(std::accumulate(b.digests.begin(), b.digests.end(), uint64_t{0}), digest);
  EXPECT_EQ(NatBuckets::FromJson(b.ToJson()).value(), b);

  Json bad = b.ToJson();
  bad["digests"][2] = "not hex";
  EXPECT_EQ(NatBuckets::FromJson(bad).error().message(),
            "field \"digests[2]\": expected a digest of 16 hex digits");
  bad = b.ToJson();
  bad["entries"].erase(0);
  EXPECT_NE(NatBuckets::FromJson(bad).error().message().find("one of each per bucket"),
            std::string::npos);
}

TEST(NatBucketsJson, AWrittenRepairDecodesToWhatWasWritten) {
  constexpr uint32_t kCount = 8;
  std::vector<NatEntry> all = Entries(0, 39);
  std::set<uint32_t> buckets = {NatEntryBucket(all[0], kCount), NatEntryBucket(all[1], kCount)};
  std::vector<NatEntry> sent = InBuckets(all, kCount, buckets);
  NatBuckets compared{.boot_id = "run-\"1\"",
                      .generation = 11,
                      .digests = {0xfedcba9876543210, 1},
                      .entries = {3, 1}};
  Json body = Json::parse(RepairBody(kCount, buckets, sent, 12, compared));
  NatBucketsRepair repair = NatBucketsRepair::FromJson(body).value();
  EXPECT_EQ(repair.count, kCount);
  EXPECT_EQ(repair.buckets, std::vector<uint32_t>(buckets.begin(), buckets.end()));
  EXPECT_EQ(repair.entries, sent);
  EXPECT_EQ(repair.generation, 12);
  EXPECT_EQ(repair.if_generation, 11);
  EXPECT_EQ(repair.if_digest, 0xfedcba9876543211u);
  EXPECT_EQ(repair.if_boot_id, "run-\"1\"");

  // An entry outside the listed buckets would be installed where nothing is taken out.
  NatEntry outside = *std::find_if(all.begin(), all.end(), [&](const NatEntry& e) {
    return buckets.count(NatEntryBucket(e, kCount)) == 0;
  });
  body["entries"].push_back(outside.ToJson());
  auto refused = NatBucketsRepair::FromJson(body);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find(fmt::format(
                "field \"entries[{}]\": the entry for {} port 0 falls in bucket {} of 8",
                sent.size(), outside.external_ip.ToString(), NatEntryBucket(outside, kCount))),
            std::string::npos)
      << refused.error().message();
  body = Json::parse(RepairBody(kCount, {}, {}, 1, compared));
  body["buckets"] = {8};
  EXPECT_EQ(NatBucketsRepair::FromJson(body).error().message(),
            "field \"buckets[0]\": expected a bucket from 0 to 7");
}

class NatBucketsOnSwitchTest : public ::testing::Test {
 protected:
  // The switch at generation 40, holding `entries`.
  void Hold(const std::vector<NatEntry>& entries) {
    ASSERT_EQ(client_->ReplaceAll(NatTable{40, entries}).value(), 40);
  }
  NatTable Sorted(int64_t generation, std::vector<NatEntry> entries) {
    std::sort(entries.begin(), entries.end(), [](const NatEntry& a, const NatEntry& b) {
      return std::tie(a.external_ip, a.first_port) < std::tie(b.external_ip, b.first_port);
    });
    return NatTable{generation, std::move(entries)};
  }

  // The switch's table as a repair is judged on it.
  NatBuckets Compared() { return client_->GetNatBuckets(1).value(); }

  std::unique_ptr<SwitchAgentDaemon> agent_ = SwitchAgentDaemon::Start(DaemonOptions{}).value();
  std::unique_ptr<SwitchAgentClient> client_ = MakeSwitchAgentClient(agent_->base_url(), 2000);
  http::HttpClient control_{"switch agent", agent_->base_url(), std::chrono::milliseconds(2000)};
};

TEST_F(NatBucketsOnSwitchTest, TheBucketsAreTheTablesWithItsRunAndGeneration) {
  Hold(Entries(0, 39));
  NatBuckets expected = NatBuckets::Of(agent_->Nat().entries, 8);
  expected.boot_id = agent_->CurrentStatus().boot_id;
  expected.generation = 40;
  EXPECT_EQ(client_->GetNatBuckets(8).value(), expected);

  for (const char* count : {"0", "65537", "x"}) {
    auto answer = control_.Call("GET", fmt::format("/nat/buckets?count={}", count)).value();
    EXPECT_EQ(answer.status, 400) << count;
    EXPECT_NE(answer.body.find("query parameter \\\"count\\\": expected an integer from 1 to "
                               "65536"),
              std::string::npos)
        << answer.body;
  }
}

// The switch lacks one desired entry, holds one retargeted and one the control plane does not
// want, and one more unwanted in a bucket the repair does not list: only the listed buckets
// change, to exactly what was sent.
TEST_F(NatBucketsOnSwitchTest, ARepairReplacesOnlyTheListedBucketsAndSaysWhatChanged) {
  constexpr uint32_t kCount = 8;
  const std::vector<NatEntry> desired = Entries(0, 39);
  std::vector<NatEntry> held(desired.begin() + 1, desired.end());  // lacks Entry(0)
  held[0] = Entry(1, 99);                                          // Entry(1) retargeted
  NatEntry stray = Entry(200);
  // One unwanted entry in a bucket that is listed, one in a bucket that is not.
  std::set<uint32_t> buckets = {NatEntryBucket(desired[0], kCount),
                                NatEntryBucket(desired[1], kCount), NatEntryBucket(stray, kCount)};
  NatEntry unlisted = Entry(201);
  for (int n = 202; buckets.count(NatEntryBucket(unlisted, kCount)) != 0; ++n) unlisted = Entry(n);
  held.push_back(stray);
  held.push_back(unlisted);
  Hold(held);

  const std::vector<NatEntry> sent = InBuckets(desired, kCount, buckets);
  ASSERT_LT(sent.size(), desired.size()) << "every bucket listed: choose other entries";
  NatBucketsRepaired answer =
      client_->RepairBucketsWritten(RepairBody(kCount, buckets, sent, 41, Compared())).value();
  EXPECT_TRUE(answer.replaced);
  EXPECT_EQ(answer.generation, 41);
  EXPECT_EQ(answer.boot_id, agent_->CurrentStatus().boot_id);
  EXPECT_EQ(answer.added, 1);
  EXPECT_EQ(answer.changed, 1);
  EXPECT_EQ(answer.removed, 1);
  std::vector<NatEntry> expected = desired;
  expected.push_back(unlisted);
  EXPECT_EQ(agent_->Nat(), Sorted(41, expected));
  uint64_t digest = 0;
  for (const NatEntry& e : expected) digest += NatEntryHash(e);
  EXPECT_EQ(agent_->CurrentStatus().digest, digest);
  EXPECT_EQ(agent_->CurrentStatus().entries, static_cast<int64_t>(expected.size()));
}

// A repair judged on another table than the switch holds now changes nothing: another
// generation, another run, or the same generation with other entries (another server's repair
// changed buckets this one judged equal to the datastore's).
TEST_F(NatBucketsOnSwitchTest, ARepairJudgedOnAnotherTableChangesNothing) {
  Hold(Entries(1, 39));
  const NatTable before = agent_->Nat();
  const std::set<uint32_t> buckets = {NatEntryBucket(Entry(0), 8)};
  const std::vector<NatEntry> sent = InBuckets(Entries(0, 39), 8, buckets);
  NatBuckets generation = Compared(), run = Compared(), digest = Compared();
  generation.generation = 39;
  run.boot_id = "another run";
  digest.digests[0] += 1;
  for (const NatBuckets& compared : {generation, run, digest}) {
    NatBucketsRepaired answer =
        client_->RepairBucketsWritten(RepairBody(8, buckets, sent, 41, compared)).value();
    EXPECT_FALSE(answer.replaced) << compared.ToJson().dump();
    EXPECT_EQ(answer.generation, 40);
    EXPECT_EQ(answer.added + answer.removed + answer.changed, 0);
    EXPECT_EQ(agent_->Nat(), before);
  }
  EXPECT_TRUE(
      client_->RepairBucketsWritten(RepairBody(8, buckets, sent, 41, Compared())).value().replaced);
}

// As PUT /nat: the control plane labels a switch ahead of the datastore with the datastore's
// version, and the lower generation starts a new run, so no server skips a change as installed.
TEST_F(NatBucketsOnSwitchTest, ARepairToALowerGenerationStartsANewRun) {
  Hold(Entries(0, 39));
  const std::string run = agent_->CurrentStatus().boot_id;
  NatBucketsRepaired same =
      client_->RepairBucketsWritten(RepairBody(8, {}, {}, 40, Compared())).value();
  EXPECT_TRUE(same.replaced);
  EXPECT_EQ(same.boot_id, run);
  NatBucketsRepaired lower =
      client_->RepairBucketsWritten(RepairBody(8, {}, {}, 35, Compared())).value();
  EXPECT_TRUE(lower.replaced);
  EXPECT_EQ(lower.generation, 35);
  EXPECT_NE(lower.boot_id, run);
  EXPECT_EQ(agent_->Nat().entries.size(), 40u);
}

}  // namespace
}  // namespace fp::agents
