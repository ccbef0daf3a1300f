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
#include <mutex>
#include <optional>
#include <random>
#include <set>
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

// Two sleds, and each writer's floating IP and instance: writers never conflict on a row of
// their own, only on the version they take.
struct Writers {
  std::vector<Sled> sleds;
  std::vector<ExternalIp> ips;
  std::vector<Uuid> instances;
};
Writers MakeWriters(Datastore& ds) {
  Writers out;
  auto f = MakeFixture(ds, "10.0.0.1", "10.0.0.100");
  EXPECT_TRUE(Link(ds, f.pool.id, NameOrId(f.silo.id), true));
  for (int s = 0; s < 2; ++s) {
    auto sled = SledUpsert(ds, "sled-" + std::to_string(s), "http://127.0.0.1:1",
                           *IpAddr::Parse("fd00::" + std::to_string(s + 1)));
    if (!sled) ADD_FAILURE() << sled.error().message();
    out.sleds.push_back(sled.value());
  }
  for (int w = 0; w < kWriters; ++w) {
    auto ip = CreateFip(ds, f, "fip-" + std::to_string(w));
    if (!ip) ADD_FAILURE() << ip.error().message();
    out.ips.push_back(ip.value());
    auto instance = CreateInstance(ds, f, "vm-" + std::to_string(w));
    if (!instance) ADD_FAILURE() << instance.error().message();
    out.instances.push_back(instance.value());
  }
  return out;
}

// Writer w's change number i: alternately point its address at a sled (the `i + first`th,
// modulo two: an addition, and a removal of the old mapping when it moves) and remove it. Both
// forms of the ensure: the one that reads its rows, and the one held back to go with the
// COMMIT (on PostgreSQL).
Status ChangeIn(Tx& tx, const Writers& wr, int w, int i, int first) {
  const Sled& sled = wr.sleds[static_cast<size_t>((i + first) % 2)];
  const ExternalIp& ip = wr.ips[static_cast<size_t>(w)];
  const Uuid& instance = wr.instances[static_cast<size_t>(w)];
  if (i % 3 == 2) return NatRemoveForIpIn(tx, ip);
  if (i % 3 == 1) return NatEnsureForIpLaterIn(tx, ip, instance, sled);
  FP_TRY(NatEnsureForIpIn(tx, ip, instance, sled));
  return Ok();
}

TEST(NatOrder, AReaderFollowingTheFeedNeverSkipsAChangeCommittedLaterWithALowerVersion) {
  TempDatastore ds;
  Writers wr;
  ASSERT_NO_FATAL_FAILURE(wr = MakeWriters(*ds));

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
        const int hold = hold_us(rng);
        Status s = ds->Write([&](Tx& tx) -> Status {
          FP_CHECK_OK(ChangeIn(tx, wr, w, i, 0));
          // Keep the transaction open after it took its version, so that writers that took
          // later versions can commit first. On PostgreSQL the held-back forms take theirs in
          // the last exchange, with the COMMIT: the hold goes there too, in the server.
          std::this_thread::sleep_for(std::chrono::microseconds(hold));
          if (tx.postgres()) {
            FP_CHECK_OK(tx.ExecLater("SELECT pg_sleep(?::bigint / 1e6)", int64_t{hold}));
          }
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

// The feed read as the transaction that makes a change commits (NatChangesAtCommitIn, what an
// attach's first step hands its switch push: inside it on SQLite, right after its commit on
// PostgreSQL): applied to a table at the read's starting version, it must give the table at the
// version it says, however the writers' commits interleave. If a change of a lower version could
// commit after the read's snapshot, the switch would be told it is at a version it lacks a change
// of.
TEST(NatOrder, AFeedReadAtCommitHoldsEveryChangeUpToItsTransactionsVersion) {
  TempDatastore ds;
  Writers wr;
  ASSERT_NO_FATAL_FAILURE(wr = MakeWriters(*ds));
  // A table to start from: each address pointed at the first sled.
  for (int w = 0; w < kWriters; ++w) {
    ASSERT_TRUE(ds->Write([&](Tx& tx) -> Status {
      FP_TRY(NatEnsureForIpIn(tx, wr.ips[w], wr.instances[w], wr.sleds[0]));
      return Ok();
    }));
  }
  const int64_t start = NatCurrentVersion(*ds).value();

  std::mutex mu;
  std::vector<NatFeed> reads;
  std::atomic<int> failed_writes{0};
  std::vector<std::thread> writers;
  constexpr int kChanges = 20;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      std::mt19937 rng(static_cast<unsigned>(w));
      std::uniform_int_distribution<int> hold_us(0, 2000);
      for (int i = 0; i < kChanges; ++i) {
        Status s = ds->Write([&](Tx& tx) -> Status {
          FP_CHECK_OK(ChangeIn(tx, wr, w, i, 1));
          std::this_thread::sleep_for(std::chrono::microseconds(hold_us(rng)));
          return NatChangesAtCommitIn(tx, start, 100000, [&](NatFeed feed) {
            std::lock_guard<std::mutex> lock(mu);
            reads.push_back(std::move(feed));
          });
        });
        if (!s) failed_writes.fetch_add(1);
      }
    });
  }
  for (std::thread& t : writers) t.join();
  ASSERT_EQ(failed_writes.load(), 0);
  ASSERT_EQ(reads.size(), static_cast<size_t>(kWriters * kChanges)) << "one per commit";

  // Every row ever written (nothing is collected here), and the table at a version from them.
  struct Span {
    int64_t added;
    std::optional<int64_t> removed;
  };
  std::map<std::string, Span> rows;
  ASSERT_TRUE(ds->Read<bool>([&](Tx& tx) -> Result<bool> {
    for (const Row& r :
         FP_TRY(tx.Query("SELECT id, version_added, version_removed FROM nat_entry"))) {
      rows[r.Text(0)] = Span{r.Int(1), r.IsNull(2) ? std::nullopt : std::optional(r.Int(2))};
    }
    return true;
  }));
  auto table_at = [&](int64_t v) {
    std::set<std::string> out;
    for (const auto& [id, span] : rows) {
      if (span.added <= v && (!span.removed || *span.removed > v)) out.insert(id);
    }
    return out;
  };
  const std::set<std::string> at_start = table_at(start);
  std::set<int64_t> versions;
  for (const NatFeed& feed : reads) {
    std::set<std::string> replayed = at_start;
    for (const NatFeedChange& c : feed.changes) {
      EXPECT_LE(c.version, feed.current_version);
      if (c.deleted) {
        replayed.erase(c.row.id.ToString());
      } else {
        replayed.insert(c.row.id.ToString());
      }
    }
    EXPECT_EQ(replayed, table_at(feed.current_version))
        << "the read at the commit of version " << feed.current_version << " lacks a change";
    versions.insert(feed.current_version);
  }
  // On SQLite each read is made inside its transaction, at its version; on PostgreSQL right
  // after its commit, so two may find the same later commits.
  if (!ds.postgres()) {
    EXPECT_EQ(versions.size(), reads.size()) << "each at its own transaction's version";
  }
  EXPECT_GT(*versions.begin(), start);
}

// The read is handed over only once its transaction committed; on PostgreSQL it costs no round
// trip of its own (it goes with the COMMIT).
TEST(NatOrder, AFeedReadAtCommitIsHandedOverOnlyWhenItsTransactionCommits) {
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.1", "10.0.0.100");
  ASSERT_TRUE(Link(*ds, f.pool.id, NameOrId(f.silo.id), true));
  auto sled = SledUpsert(*ds, "sled-0", "http://127.0.0.1:1", *IpAddr::Parse("fd00::1"));
  ASSERT_TRUE(sled) << sled.error().message();
  auto ip = CreateFip(*ds, f, "fip");
  ASSERT_TRUE(ip);
  auto instance = CreateInstance(*ds, f, "vm");
  ASSERT_TRUE(instance);
  const int64_t start = NatCurrentVersion(*ds).value();

  std::optional<NatFeed> got;
  auto write = [&](bool fail) {
    return ds->Write([&](Tx& tx) -> Status {
      FP_CHECK_OK(NatEnsureForIpLaterIn(tx, *ip, *instance, *sled));
      FP_CHECK_OK(NatChangesAtCommitIn(tx, start, 100, [&](NatFeed feed) { got = feed; }));
      if (fail) return Fail(Error::InvalidRequest("changed my mind"));
      return Ok();
    });
  };
  ASSERT_FALSE(write(true));
  EXPECT_FALSE(got) << "handed over from a transaction that rolled back";
  EXPECT_EQ(NatCurrentVersion(*ds).value(), start);
  // A write held back after the read fails its count as the transaction commits: on SQLite the
  // read has answered by then, and is still not handed over; on PostgreSQL it is not made.
  Status late = ds->Write([&](Tx& tx) -> Status {
    FP_CHECK_OK(NatEnsureForIpLaterIn(tx, *ip, *instance, *sled));
    FP_CHECK_OK(NatChangesAtCommitIn(tx, start, 100, [&](NatFeed feed) { got = feed; }));
    return tx.ExecLaterOne(Error::InvalidRequest("no such row"),
                           "UPDATE nat_entry SET time_deleted = time_deleted WHERE 1 = 0");
  });
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error().message(), "no such row");
  EXPECT_FALSE(got) << "handed over from a transaction whose commit failed";
  EXPECT_EQ(NatCurrentVersion(*ds).value(), start);

  const int64_t before = ds->round_trips();
  ASSERT_TRUE(write(false));
  const int64_t trips = ds->round_trips() - before;
  // On PostgreSQL the version the failed COMMIT above took from the sequence is a gap, and the
  // change, the turn's lock before it, COMMIT and the read after it go in one exchange.
  const int64_t version = ds.postgres() ? start + 2 : start + 1;
  if (ds.postgres()) {
    EXPECT_EQ(trips, 1) << "BEGIN, the turn's lock, the held-back writes, COMMIT and the read";
  }
  ASSERT_TRUE(got);
  EXPECT_EQ(got->current_version, version);
  ASSERT_EQ(got->changes.size(), 1u);
  EXPECT_EQ(got->changes[0].version, version);
  EXPECT_FALSE(got->changes[0].deleted);
  EXPECT_EQ(got->changes[0].row.instance_id, *instance);

  // The same change again finds its row as it is and takes no version.
  got.reset();
  ASSERT_TRUE(write(false));
  ASSERT_TRUE(got);
  EXPECT_EQ(got->current_version, version);
}

}  // namespace
}  // namespace fp::db
