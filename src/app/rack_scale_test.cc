// The rack at a size that fits CI (issue 15): 2,000 instances on 8 sleds, 20,000 NAT entries
// on two switches; mid-run one switch agent restarts empty and one sled agent restarts (losing
// its VMs). The datastore, both switches and every sled end up equal, through the switches'
// heartbeats and the sleds' reports alone.
//
// On PostgreSQL 500 instances, and the NAT table still 20,000 entries: what is at scale there
// (the switch's reload from the whole table, the feed and digests over it, the sled's full
// comparison) keeps its size, and the creates, three quarters of the PostgreSQL run's CPU
// under ASan (55 s of the sanitizer stage's 267 s, 2026-12-05), are the same code the SQLite
// run drives 2,000 times.

#include <gtest/gtest.h>

#include <chrono>

#include "app/testing/rack_world.h"
#include "common/testing/wait_for.h"
#include "db/testing/temp_datastore.h"
#include "http/client.h"

namespace fp::app {
namespace {

using std::chrono::milliseconds;
using testing::RackWorld;

constexpr int kNatEntries = 20000;  // the instances' SNAT entries and unowned ones
int Instances() { return db::testing::OnPostgres() ? 500 : 2000; }

void Reset(const std::string& base_url) {
  http::HttpClient control("agent", base_url, milliseconds(5000));
  auto answer = control.Call("POST", "/reset");
  ASSERT_TRUE(answer) << answer.error().message();
  ASSERT_EQ(answer->status, 200) << answer->body;
}

TEST(RackScaleTest, AfterASwitchAndASledRestartMidRunEverythingEndsEqual) {
  RackWorld rack({.sleds = 8,
                  .switches = 2,
                  .heartbeat_ms = 100,
                  .watch = {.full_period = std::chrono::seconds(2)}});
  const int instances = Instances();
  ASSERT_TRUE(rack.AddNatRows(kNatEntries - instances));
  rack.StartBackground();
  // Half-way through the creates, a switch agent and a sled agent restart empty.
  auto created = rack.CreateInstances(instances, 4, [&](int k) {
    if (k == instances / 2) {
      Reset(rack.switch_sims[1]->base_url());
      Reset(rack.sled_sims[3]->base_url());
    }
  });
  ASSERT_TRUE(created) << created.error().message();
  EXPECT_EQ(*created, instances);

  // Compared every 200 ms: each comparison reads the whole NAT table.
  std::optional<std::string> last;
  fp::testing::WaitFor([&] { return !(last = rack.Disagreement()); }, std::chrono::seconds(120),
                       milliseconds(200));
  ASSERT_FALSE(last) << *last;

  // The restarts were noticed as such: the switch reloaded, the sled compared in full.
  auto switches = rack.nat().SwitchStatuses();
  EXPECT_GE(switches[1].restarts_seen, 1);
  EXPECT_GE(switches[1].reloads, 1);
  EXPECT_EQ(switches[0].restarts_seen, 0);
  int64_t sled_restarts = 0;
  for (const auto& s : rack.watcher->SledStatuses()) {
    if (s.sled_id == rack.sled_ids[3]) sled_restarts = s.restarts_seen;
  }
  EXPECT_EQ(sled_restarts, 1);
  // 20,000 entries on each switch (the restarted one reloaded them), less at most half the
  // instances' own: those failed with the restarted sled may have lost theirs.
  for (const auto& sw : rack.switch_sims) {
    EXPECT_GE(sw->Nat().entries.size(), static_cast<size_t>(kNatEntries - instances / 2));
  }
  rack.StopBackground();
}

}  // namespace
}  // namespace fp::app
