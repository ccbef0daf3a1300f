// NAT versions in commit order (sagas-and-reliability.md C4): a switch follows the NAT table by
// asking for the changes after the last version it applied. If a transaction could commit a
// change numbered below one already committed and read, the reader would have moved past that
// number and never see the change. Many writers on their own connections change NAT rows, each
// holding its transaction open for a moment after taking its version, while a reader follows
// the feed as a switch does; the reader's replay must end equal to the table.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "db/instances.h"
#include "db/ip_pools.h"
#include "db/nat.h"
#include "db/sleds.h"
#include "db/testing/temp_datastore.h"

namespace fp::db {
namespace {

using testing::CreateFip;
using testing::MakeFixture;
using testing::TempDatastore;

constexpr int kWriters = 6;
constexpr int kChangesPerWriter = 40;

Result<Uuid> CreateInstance(Datastore& ds, const testing::Fixture& f, const std::string& name) {
  InstanceCreate c;
  c.id = Uuid::Random();
  c.nic_id = Uuid::Random();
  c.project_id = f.project.id;
  c.name = name;
  c.hostname = name;
  c.memory = int64_t{1} << 30;
  c.nic = NicKind::kIpv4;
  return ds.Write<Uuid>([&](Tx& tx) -> Result<Uuid> {
    FP_TRY(InstanceCreateRecordIn(tx, c));
    FP_CHECK_OK(InstanceFinishCreateIn(tx, c.id));
    return c.id;
  });
}

TEST(NatOrder, AReaderFollowingTheFeedNeverSkipsAChangeCommittedLaterWithALowerVersion) {
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.1", "10.0.0.100");
  ASSERT_TRUE(Link(*ds, f.pool.id, NameOrId(f.silo.id), true));
  std::vector<Sled> sleds;
  for (int s = 0; s < 2; ++s) {
    auto sled = SledUpsert(*ds, "sled-" + std::to_string(s), "http://127.0.0.1:1",
                           *IpAddr::Parse("fd00::" + std::to_string(s + 1)));
    ASSERT_TRUE(sled) << sled.error().message();
    sleds.push_back(*sled);
  }
  // Each writer owns one floating IP and one instance: writers never conflict on a row of
  // their own, only on the version they take.
  std::vector<ExternalIp> ips;
  std::vector<Uuid> instances;
  for (int w = 0; w < kWriters; ++w) {
    auto ip = CreateFip(*ds, f, "fip-" + std::to_string(w));
    ASSERT_TRUE(ip) << ip.error().message();
    ips.push_back(*ip);
    auto instance = CreateInstance(*ds, f, "vm-" + std::to_string(w));
    ASSERT_TRUE(instance) << instance.error().message();
    instances.push_back(*instance);
  }

  std::atomic<int> writers_left{kWriters};
  std::atomic<int> failed_writes{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      std::mt19937 rng(static_cast<unsigned>(w));
      std::uniform_int_distribution<int> hold_us(0, 2000);
      for (int i = 0; i < kChangesPerWriter; ++i) {
        // Alternately point the address at a sled (an addition, and a removal of the old
        // mapping when it moves) and remove it.
        Status s = ds->Write([&](Tx& tx) -> Status {
          // Both forms of the ensure: the one that reads its rows, and the one held back to
          // go with the COMMIT (on PostgreSQL).
          if (i % 3 == 2) {
            FP_CHECK_OK(NatRemoveForIpIn(tx, ips[w]));
          } else if (i % 3 == 1) {
            FP_CHECK_OK(NatEnsureForIpLaterIn(tx, ips[w], instances[w], sleds[i % 2]));
          } else {
            FP_TRY(NatEnsureForIpIn(tx, ips[w], instances[w], sleds[i % 2]));
          }
          // Keep the transaction open after it took its version, so that writers that took
          // later versions can commit first.
          std::this_thread::sleep_for(std::chrono::microseconds(hold_us(rng)));
          return Ok();
        });
        if (!s) failed_writes.fetch_add(1);
      }
      writers_left.fetch_sub(1);
    });
  }

  // The reader: a switch applying the feed to its own table.
  std::map<std::string, NatEntry> applied;  // by row id
  int64_t generation = 0;
  int64_t changes_seen = 0;
  int64_t skipped = 0;
  auto follow = [&]() -> Status {
    NatFeed feed = FP_TRY(NatChangesSince(*ds, generation, 1000));
    for (const NatFeedChange& c : feed.changes) {
      EXPECT_GT(c.version, generation) << "the feed went backwards";
      generation = c.version;
      ++changes_seen;
      if (c.deleted) {
        applied.erase(c.row.id.ToString());
      } else {
        applied[c.row.id.ToString()] = c.row;
      }
    }
    // Rows are never re-added (a new mapping is a new row), so a row live now whose addition
    // is at or below the reader's generation was either in the feed or committed after the
    // reader passed its version: the skip this test is about.
    for (const NatEntry& e : FP_TRY(NatLive(*ds))) {
      if (e.version_added <= generation && applied.count(e.id.ToString()) == 0) {
        ++skipped;
        ADD_FAILURE() << "NAT row at version " << e.version_added
                      << " committed after the reader had passed version " << generation;
      }
    }
    return Ok();
  };
  while (writers_left.load() > 0) {
    Status s = follow();
    ASSERT_TRUE(s) << s.error().message();
  }
  for (std::thread& t : writers) t.join();
  ASSERT_TRUE(follow());
  ASSERT_EQ(failed_writes.load(), 0);

  auto live = NatLive(*ds);
  ASSERT_TRUE(live) << live.error().message();
  std::map<std::string, int64_t> want;
  for (const NatEntry& e : *live) want[e.id.ToString()] = e.version_added;
  std::map<std::string, int64_t> got;
  for (const auto& [id, e] : applied) got[id] = e.version_added;
  EXPECT_EQ(got, want) << "the reader's replay of the feed differs from the NAT table: a change "
                          "was committed below a version the reader had already passed";
  EXPECT_EQ(skipped, 0);
  EXPECT_GT(changes_seen, kWriters) << "the reader must have followed the writers, not only "
                                       "read the end state";
}

}  // namespace
}  // namespace fp::db
