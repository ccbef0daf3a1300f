// Each check-then-change of the datastore raced against a conflicting change. The interleaving
// is forced: one thread is held inside its transaction, right after its check, until every
// contender has reached the point where it waits to write. A datastore that checked in one
// transaction and changed in another would let the contenders in during that window.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <thread>

#include "common/mutex.h"
#include "db/attach.h"
#include "db/instances.h"
#include "db/quotas.h"
#include "db/snat.h"
#include "db/testing/temp_datastore.h"

namespace fp::db {
namespace {

using testing::ByName;
using testing::CreateFip;
using testing::FromPool;
using testing::MakeFixture;
using testing::Range;
using testing::TempDatastore;

constexpr int kContenders = 7;  // plus the held thread: 8 threads

// Holds the first thread that reaches sync point `held_at` until `contenders` other threads
// are waiting for the writer lock.
class ForcedInterleaving {
 public:
  ForcedInterleaving(Datastore& ds, std::string held_at) : ds_(ds), held_at_(std::move(held_at)) {
    ds_.TEST_SetSyncPoint([this](std::string_view name) { OnSyncPoint(name); });
  }
  ~ForcedInterleaving() { ds_.TEST_SetSyncPoint(nullptr); }

  // Runs `held` on one thread and, once it is held, `contender(i)` on kContenders threads.
  void Run(const std::function<void()>& held, const std::function<void(int)>& contender) {
    std::thread holder(held);
    {
      MutexLock lock(mu_);
      lock.Wait(cv_, [&]() FP_REQUIRES(mu_) { return holding_; });
    }
    std::vector<std::thread> others;
    for (int i = 0; i < kContenders; ++i) others.emplace_back(contender, i);
    holder.join();
    for (auto& t : others) t.join();
    MutexLock lock(mu_);
    EXPECT_TRUE(released_) << "the held thread never reached " << held_at_;
  }

 private:
  void OnSyncPoint(std::string_view name) {
    MutexLock lock(mu_);
    if (name == "tx:waiting_for_writer" && holding_) {
      ++waiting_;
      cv_.notify_all();
      return;
    }
    if (name == held_at_ && !holding_ && !released_) {
      holding_ = true;
      cv_.notify_all();
      lock.Wait(cv_, [&]() FP_REQUIRES(mu_) { return waiting_ >= kContenders; });
      // The contenders are about to block on the writer lock this transaction holds.
      released_ = true;
    }
  }

  Datastore& ds_;
  std::string held_at_;
  Mutex mu_;
  std::condition_variable cv_;
  bool holding_ FP_GUARDED_BY(mu_) = false;
  bool released_ FP_GUARDED_BY(mu_) = false;
  int waiting_ FP_GUARDED_BY(mu_) = 0;
};

// Live external IPs whose `column` (ip_pool_range_id, ip_pool_id) is `id`.
int64_t LiveIpsWhere(Datastore& ds, std::string_view column, const Uuid& id) {
  return ds
      .Read<int64_t>([&](Tx& tx) -> Result<int64_t> {
        auto row = FP_TRY(tx.QueryRow(
            fmt::format("SELECT count(*) FROM external_ip WHERE {} = ? AND time_deleted IS NULL",
                        column),
            id));
        return row->Int(0);
      })
      .value();
}

int64_t LiveIpsInRange(Datastore& ds, const Uuid& range_id) {
  return LiveIpsWhere(ds, "ip_pool_range_id", range_id);
}

bool RangeIsLive(Datastore& ds, const Uuid& range_id) {
  return ds
      .Read<bool>([&](Tx& tx) -> Result<bool> {
        auto row = FP_TRY(tx.QueryRow(
            "SELECT 1 FROM ip_pool_range WHERE id = ? AND time_deleted IS NULL", range_id));
        return row.has_value();
      })
      .value();
}

TEST(DatastoreRace, RangeRemoveRacingAllocationNeverStrandsAnAddress) {
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.0", "10.0.0.15");
  ASSERT_TRUE(Link(*ds, f.pool.id, NameOrId(f.silo.id), true));
  ForcedInterleaving race(*ds, "ip_range_remove:checked");
  Status removed = Ok();
  std::atomic<int> created{0};
  race.Run([&] { removed = RangeRemove(*ds, f.pool.id, f.range.range); },
           [&](int i) {
             auto r = CreateFip(*ds, f, "fip-" + std::to_string(i));
             if (r) {
               ++created;
             } else {
               // Once the range is gone the pool is empty: only exhaustion is a valid refusal.
               EXPECT_EQ(r.error().HttpStatus(), 507) << r.error().message();
             }
           });
  if (!removed && ds.postgres()) {
    // SERIALIZABLE let allocations commit first (SQLite's single writer cannot): the remove,
    // retried, must then see them and refuse, and every address stays in a live range.
    EXPECT_NE(removed.error().message().find("while external IP addresses are allocated"),
              std::string::npos)
        << removed.error().message();
    EXPECT_GT(created.load(), 0);
    EXPECT_TRUE(RangeIsLive(*ds, f.range.id));
    EXPECT_EQ(LiveIpsInRange(*ds, f.range.id), created.load());
    return;
  }
  // The held remove decided on an empty range and committed before any allocation ran.
  ASSERT_TRUE(removed) << removed.error().message();
  EXPECT_EQ(created.load(), 0);
  EXPECT_FALSE(RangeIsLive(*ds, f.range.id));
  EXPECT_EQ(LiveIpsInRange(*ds, f.range.id), 0);
}

TEST(DatastoreRace, AllocationRacingRangeRemoveBlocksTheRemove) {
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.0", "10.0.0.15");
  ASSERT_TRUE(Link(*ds, f.pool.id, NameOrId(f.silo.id), true));
  ForcedInterleaving race(*ds, "floating_ip_create:allocated");
  std::atomic<int> removed{0};
  Result<ExternalIp> first = Fail(Error::Internal("not run"));
  race.Run([&] { first = CreateFip(*ds, f, "first"); },
           [&](int) {
             Status s = RangeRemove(*ds, f.pool.id, f.range.range);
             if (s) {
               ++removed;
             } else if (ds.postgres() &&
                        s.error().message().find("does not exist") != std::string::npos) {
               // Another remove committed first (see below).
             } else {
               EXPECT_EQ(s.error().HttpStatus(), 400);
               EXPECT_NE(s.error().message().find(
                             "IP pool ranges cannot be deleted while external IP addresses are "
                             "allocated from them"),
                         std::string::npos)
                   << s.error().message();
             }
           });
  if (!first && ds.postgres()) {
    // SERIALIZABLE let a remove commit first (SQLite's single writer cannot): the create,
    // retried, finds the pool empty, and nothing is left in the removed range.
    EXPECT_EQ(first.error().HttpStatus(), 507) << first.error().message();
    EXPECT_EQ(removed.load(), 1);
    EXPECT_FALSE(RangeIsLive(*ds, f.range.id));
    EXPECT_EQ(LiveIpsInRange(*ds, f.range.id), 0);
    return;
  }
  ASSERT_TRUE(first) << first.error().message();
  EXPECT_EQ(removed.load(), 0);
  EXPECT_TRUE(RangeIsLive(*ds, f.range.id));
  EXPECT_EQ(LiveIpsInRange(*ds, f.range.id), 1);
}

TEST(DatastoreRace, PoolDeleteRacingRangeAddLeavesNoRangeInADeletedPool) {
  TempDatastore ds;
  model::PoolCreate pc;
  pc.id = Uuid::Random();
  pc.name = "empty";
  pc.description = "";
  auto pool = *PoolCreate(*ds, pc);
  ForcedInterleaving race(*ds, "ip_pool_delete:checked");
  Status deleted = Ok();
  std::atomic<int> added{0};
  race.Run([&] { deleted = PoolDelete(*ds, pool.id); },
           [&](int i) {
             std::string a = "10.7." + std::to_string(i) + ".0";
             auto r = RangeAdd(*ds, pool.id, Uuid::Random(), Range(a, a));
             if (r) {
               ++added;
             } else {
               EXPECT_EQ(r.error().message(),
                         "not found: ip-pool with id \"" + pool.id.ToString() + "\"");
             }
           });
  auto ranges = ds->Read<int64_t>([&](Tx& tx) -> Result<int64_t> {
    auto row = FP_TRY(tx.QueryRow(
        "SELECT count(*) FROM ip_pool_range WHERE ip_pool_id = ? AND time_deleted IS NULL",
        pool.id));
    return row->Int(0);
  });
  if (!deleted && ds.postgres()) {
    // SERIALIZABLE let the adds commit first (SQLite's single writer cannot): then the delete,
    // retried, must see them and refuse.
    EXPECT_EQ(deleted.error().message(), "IP Pool cannot be deleted while it contains IP ranges");
    EXPECT_EQ(*ranges, added.load());
    EXPECT_GT(added.load(), 0);
    return;
  }
  ASSERT_TRUE(deleted) << deleted.error().message();
  EXPECT_EQ(added.load(), 0);
  EXPECT_EQ(*ranges, 0);
}

TEST(DatastoreRace, RangeAddRacingPoolDeleteBlocksTheDelete) {
  TempDatastore ds;
  model::PoolCreate pc;
  pc.id = Uuid::Random();
  pc.name = "empty";
  pc.description = "";
  auto pool = *PoolCreate(*ds, pc);
  ForcedInterleaving race(*ds, "ip_range_add:checked");
  std::atomic<int> deleted{0};
  Result<IpPoolRange> added = Fail(Error::Internal("not run"));
  race.Run([&] { added = RangeAdd(*ds, pool.id, Uuid::Random(), Range("10.8.0.0", "10.8.0.9")); },
           [&](int) {
             Status s = PoolDelete(*ds, pool.id);
             if (s) {
               ++deleted;
             } else if (!(ds.postgres() && s.error().kind() == ErrorKind::kNotFound)) {
               EXPECT_EQ(s.error().message(),
                         "IP Pool cannot be deleted while it contains IP ranges");
             }
           });
  if (!added && ds.postgres()) {
    // SERIALIZABLE let a delete commit first (SQLite's single writer cannot): the add, retried,
    // must then find the pool gone, and no range may be left in it.
    EXPECT_EQ(added.error().message(), "not found: ip-pool with id \"" + pool.id.ToString() + "\"");
    EXPECT_EQ(deleted.load(), 1);
    EXPECT_FALSE(PoolLookup(*ds, NameOrId(pool.id)));
    EXPECT_TRUE(RangeList(*ds, pool.id, std::nullopt, 10).error().kind() == ErrorKind::kNotFound);
    return;
  }
  ASSERT_TRUE(added) << added.error().message();
  EXPECT_EQ(deleted.load(), 0);
  EXPECT_TRUE(PoolLookup(*ds, NameOrId(pool.id)));
}

TEST(DatastoreRace, UnlinkRacingFloatingIpCreateNeverLeavesAnIpFromAnUnlinkedPool) {
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.0", "10.0.0.15");
  ASSERT_TRUE(Link(*ds, f.pool.id, NameOrId(f.silo.id), false));
  ForcedInterleaving race(*ds, "ip_pool_unlink:checked");
  Status unlinked = Ok();
  std::atomic<int> created{0};
  race.Run([&] { unlinked = Unlink(*ds, f.pool.id, f.silo.id); },
           [&](int i) {
             auto r = CreateFip(*ds, f, "fip-" + std::to_string(i), FromPool("pool"));
             if (r && ds.postgres()) {
               ++created;  // committed before the unlink (see below)
               return;
             }
             ASSERT_FALSE(r) << "allocated " << r->ip.ToString() << " from an unlinked pool";
             EXPECT_EQ(r.error().message(), "not found: ip-pool with name \"pool\"");
           });
  if (!unlinked && ds.postgres()) {
    // SERIALIZABLE let creates commit first (SQLite's single writer cannot): the unlink,
    // retried, must then see them and refuse.
    EXPECT_NE(unlinked.error().message().find("in use in the linked silo"), std::string::npos)
        << unlinked.error().message();
    EXPECT_GT(created.load(), 0);
    EXPECT_EQ(LiveIpsInRange(*ds, f.range.id), created.load());
    return;
  }
  ASSERT_TRUE(unlinked) << unlinked.error().message();
  EXPECT_EQ(created.load(), 0) << "allocated from an unlinked pool";
  EXPECT_EQ(LiveIpsInRange(*ds, f.range.id), 0);
}

// An IP quota is checked, then the row that counts is written: a create held in between, its
// check passed, while seven others check and write, must still leave exactly the quota.
TEST(DatastoreRace, FloatingIpCreatesRacingAtAQuotaLeaveExactlyTheQuota) {
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.0", "10.0.0.15");
  ASSERT_TRUE(Link(*ds, f.pool.id, NameOrId(f.silo.id), false));
  model::ProjectQuotasUpdate quota;
  quota.ipv4 = 1;
  ASSERT_TRUE(ProjectQuotasUpdate(*ds, f.project.id, quota));
  ForcedInterleaving race(*ds, "floating_ip_create:allocated");
  std::atomic<int> created{0};
  auto create = [&](const std::string& name) {
    auto r = CreateFip(*ds, f, name, FromPool("pool"));
    if (r) {
      ++created;
    } else {
      EXPECT_EQ(r.error().kind(), ErrorKind::kQuotaExceeded) << r.error().message();
    }
  };
  race.Run([&] { create("held"); }, [&](int i) { create("fip-" + std::to_string(i)); });
  EXPECT_EQ(created.load(), 1);
  EXPECT_EQ(LiveIpsInRange(*ds, f.range.id), 1);
}

TEST(DatastoreRace, FloatingIpCreateRacingUnlinkBlocksTheUnlink) {
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.0", "10.0.0.15");
  ASSERT_TRUE(Link(*ds, f.pool.id, NameOrId(f.silo.id), false));
  ForcedInterleaving race(*ds, "floating_ip_create:allocated");
  std::atomic<int> unlinked{0};
  Result<ExternalIp> holder = Fail(Error::Internal("not run"));
  race.Run([&] { holder = CreateFip(*ds, f, "holder", FromPool("pool")); },
           [&](int) {
             Status s = Unlink(*ds, f.pool.id, f.silo.id);
             if (s) {
               ++unlinked;
             } else if (ds.postgres() && s.error().kind() == ErrorKind::kNotFound) {
               // Another unlink committed first (see below).
             } else {
               EXPECT_NE(s.error().message().find(
                             "IP addresses from this pool are in use in the linked silo"),
                         std::string::npos);
               EXPECT_NE(s.error().message().find("holder"), std::string::npos)
                   << "the refusal names the floating IP that holds the pool";
             }
           });
  if (!holder && ds.postgres()) {
    // SERIALIZABLE let an unlink commit first: the create, retried, finds no linked pool.
    EXPECT_EQ(holder.error().message(), "not found: ip-pool with name \"pool\"");
    EXPECT_EQ(unlinked.load(), 1);
    EXPECT_EQ(LiveIpsInRange(*ds, f.range.id), 0);
    return;
  }
  ASSERT_TRUE(holder) << holder.error().message();
  EXPECT_EQ(unlinked.load(), 0);
}

// An instance of the fixture's project holding a SNAT address from the silo's default pool
// and, if `ephemeral_pool` is given, an ephemeral address from that pool: the effects of the
// instance create saga, in one transaction (which passes the sync point "test:instance_created"
// before it commits).
Result<Uuid> CreateInstanceWithAddresses(Datastore& ds, const testing::Fixture& f,
                                         const std::string& name,
                                         std::optional<std::string> ephemeral_pool = {}) {
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
    FP_TRY(SnatAllocateIn(tx, Uuid::Random(), c.id, f.silo.id));
    if (ephemeral_pool) {
      PoolSelector selector;
      selector.mode = PoolSelector::Mode::kExplicitPool;
      selector.pool = ByName(*ephemeral_pool);
      AttachRequest r;
      r.ip_id = Uuid::Random();
      r.kind = IpKind::kEphemeral;
      r.instance_id = c.id;
      r.saga_id = Uuid::Random();
      r.creating = true;
      FP_TRY(EphemeralAllocateIn(tx, r.ip_id, c.id, f.silo.id, selector));
      FP_TRY(BeginAttachIn(tx, r));
      FP_TRY(CompleteOpIn(tx, r.ip_id, AttachState::kAttaching, AttachState::kAttached));
    }
    FP_CHECK_OK(InstanceFinishCreateIn(tx, c.id));
    ds.SyncPoint("test:instance_created");
    return c.id;
  });
}

TEST(DatastoreRace, UnlinkIsRefusedWhileAnInstanceOfTheSiloHoldsSnatOrEphemeral) {
  TempDatastore ds;
  auto snat_pool = MakeFixture(*ds, "10.0.0.0", "10.0.0.15", "snat-pool");
  auto eph_pool = MakeFixture(*ds, "10.1.0.0", "10.1.0.15", "eph-pool");
  ASSERT_TRUE(Link(*ds, snat_pool.pool.id, NameOrId(snat_pool.silo.id), true));
  ASSERT_TRUE(Link(*ds, eph_pool.pool.id, NameOrId(eph_pool.silo.id), false));
  auto instance = CreateInstanceWithAddresses(*ds, snat_pool, "web-1", "eph-pool");
  ASSERT_TRUE(instance) << instance.error().message();

  Status s = Unlink(*ds, snat_pool.pool.id, snat_pool.silo.id);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message(),
            "IP addresses from this pool are in use in the linked silo (instance \"web-1\" in "
            "project \"p1\" holds 10.0.0.0 as its SNAT address)");
  s = Unlink(*ds, eph_pool.pool.id, eph_pool.silo.id);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message(),
            "IP addresses from this pool are in use in the linked silo (instance \"web-1\" in "
            "project \"p1\" holds 10.1.0.0 as its ephemeral address)");
  EXPECT_EQ(s.error().HttpStatus(), 400);

  // Once the instance is gone its addresses are released and the pools unlink.
  ASSERT_TRUE(ds->Write<bool>([&](Tx& tx) -> Result<bool> {
    FP_CHECK_OK(InstanceDeleteIn(tx, *instance));
    return true;
  }));
  EXPECT_TRUE(Unlink(*ds, snat_pool.pool.id, snat_pool.silo.id));
  EXPECT_TRUE(Unlink(*ds, eph_pool.pool.id, eph_pool.silo.id));
}

TEST(DatastoreRace, UnlinkIgnoresAddressesHeldInOtherSilos) {
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.0", "10.0.0.15");
  ASSERT_TRUE(Link(*ds, f.pool.id, NameOrId(f.silo.id), true));
  model::SiloCreate other;
  other.id = Uuid::Random();
  other.name = "s2";
  other.description = "";
  ASSERT_TRUE(SiloCreate(*ds, other));
  ASSERT_TRUE(Link(*ds, f.pool.id, NameOrId(other.id), false));
  ASSERT_TRUE(CreateInstanceWithAddresses(*ds, f, "web-1"));
  EXPECT_TRUE(Unlink(*ds, f.pool.id, other.id)) << "s2 holds nothing of the pool";
  EXPECT_FALSE(Unlink(*ds, f.pool.id, f.silo.id));
}

TEST(DatastoreRace, InstanceCreateRacingUnlinkBlocksTheUnlink) {
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.0", "10.0.0.15");
  auto eph = MakeFixture(*ds, "10.1.0.0", "10.1.0.15", "eph-pool");
  ASSERT_TRUE(Link(*ds, f.pool.id, NameOrId(f.silo.id), true));
  ASSERT_TRUE(Link(*ds, eph.pool.id, NameOrId(f.silo.id), false));
  ForcedInterleaving race(*ds, "test:instance_created");
  std::atomic<int> unlinked{0};
  Result<Uuid> created = Fail(Error::Internal("not run"));
  race.Run([&] { created = CreateInstanceWithAddresses(*ds, f, "holder", "eph-pool"); },
           [&](int i) {
             // Half the contenders unlink the SNAT pool, half the ephemeral one.
             Status s = Unlink(*ds, i % 2 == 0 ? f.pool.id : eph.pool.id, f.silo.id);
             if (s) {
               ++unlinked;
             } else if (ds.postgres() && s.error().kind() == ErrorKind::kNotFound) {
               // Another unlink of the same pool committed first (see below).
             } else {
               EXPECT_NE(s.error().message().find(
                             "IP addresses from this pool are in use in the linked silo (instance "
                             "\"holder\""),
                         std::string::npos)
                   << s.error().message();
             }
           });
  if (!created && ds.postgres()) {
    // SERIALIZABLE let an unlink commit first (SQLite's single writer cannot): the create,
    // retried, must then fail for want of its pool and leave no address behind.
    EXPECT_EQ(created.error().kind(), ErrorKind::kNotFound) << created.error().message();
    EXPECT_GE(unlinked.load(), 1);
    EXPECT_EQ(LiveIpsWhere(*ds, "ip_pool_id", f.pool.id), 0);
    EXPECT_EQ(LiveIpsWhere(*ds, "ip_pool_id", eph.pool.id), 0);
    return;
  }
  ASSERT_TRUE(created) << created.error().message();
  EXPECT_EQ(unlinked.load(), 0);
}

TEST(DatastoreRace, UnlinkRacingInstanceCreateLeavesNoSnatFromAnUnlinkedPool) {
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.0", "10.0.0.15");
  ASSERT_TRUE(Link(*ds, f.pool.id, NameOrId(f.silo.id), true));
  ForcedInterleaving race(*ds, "ip_pool_unlink:checked");
  Status unlinked = Ok();
  std::atomic<int> created{0};
  race.Run([&] { unlinked = Unlink(*ds, f.pool.id, f.silo.id); },
           [&](int i) {
             auto r = CreateInstanceWithAddresses(*ds, f, "vm-" + std::to_string(i));
             if (r && ds.postgres()) {
               ++created;  // committed before the unlink (see below)
               return;
             }
             ASSERT_FALSE(r) << "an instance got SNAT from a pool its silo no longer has";
             EXPECT_EQ(r.error().message(),
                       "not found: default unicast IPv4 pool for current silo");
           });
  if (!unlinked && ds.postgres()) {
    // SERIALIZABLE let creates commit first (SQLite's single writer cannot): the unlink,
    // retried, must then see their SNAT addresses and refuse.
    EXPECT_NE(unlinked.error().message().find("in use in the linked silo"), std::string::npos)
        << unlinked.error().message();
    EXPECT_GT(created.load(), 0);
    return;
  }
  ASSERT_TRUE(unlinked) << unlinked.error().message();
  EXPECT_EQ(created.load(), 0) << "an instance got SNAT from a pool its silo no longer has";
  EXPECT_EQ(LiveIpsWhere(*ds, "ip_pool_id", f.pool.id), 0);
}

TEST(DatastoreRace, FloatingIpDeleteRacingItselfReleasesTheAddressOnce) {
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.0", "10.0.0.15");
  ASSERT_TRUE(Link(*ds, f.pool.id, NameOrId(f.silo.id), true));
  auto fip = *CreateFip(*ds, f, "web");
  ForcedInterleaving race(*ds, "floating_ip_delete:checked");
  Status first = Ok();
  std::atomic<int> also_deleted{0};
  race.Run([&] { first = FloatingIpDelete(*ds, fip.id); },
           [&](int) {
             Status s = FloatingIpDelete(*ds, fip.id);
             if (s) {
               ++also_deleted;
             } else {
               EXPECT_EQ(s.error().message(),
                         "not found: floating-ip with id \"" + fip.id.ToString() + "\"");
             }
           });
  // Exactly one delete succeeds. On SQLite the held one. On PostgreSQL the held one too as a
  // rule: its one statement checked and deleted before it was held, so a contender reaching the
  // row waits for its commit and, retried, finds the IP gone; a contender committing first
  // (the held one, retried, then finds it gone) would be as correct.
  if (ds.postgres() && !first) {
    EXPECT_EQ(first.error().message(),
              "not found: floating-ip with id \"" + fip.id.ToString() + "\"");
    EXPECT_EQ(also_deleted.load(), 1);
  } else {
    ASSERT_TRUE(first);
    EXPECT_EQ(also_deleted.load(), 0);
  }
  EXPECT_EQ(Utilization(*ds, f.pool.id)->remaining, 16.0);
}

TEST(DatastoreRace, DefaultSwitchingKeepsExactlyOneDefault) {
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.0", "10.0.0.0", "pool-0");
  std::vector<Uuid> pools{f.pool.id};
  ASSERT_TRUE(Link(*ds, f.pool.id, NameOrId(f.silo.id), true));
  for (int i = 1; i <= kContenders; ++i) {
    std::string a = "10.0." + std::to_string(i) + ".0";
    auto p = MakeFixture(*ds, a, a, "pool-" + std::to_string(i));
    ASSERT_TRUE(Link(*ds, p.pool.id, NameOrId(f.silo.id), false));
    pools.push_back(p.pool.id);
  }
  ForcedInterleaving race(*ds, "ip_pool_link_update:demoted");
  race.Run([&] { ASSERT_TRUE(LinkUpdate(*ds, pools[1], f.silo.id, true)); },
           [&](int i) {
             auto r = LinkUpdate(*ds, pools[static_cast<size_t>(i) + 1], f.silo.id, true);
             EXPECT_TRUE(r) << r.error().message();
           });
  auto defaults = ds->Read<int64_t>([&](Tx& tx) -> Result<int64_t> {
    auto row = FP_TRY(tx.QueryRow(
        "SELECT count(*) FROM ip_pool_silo_link WHERE silo_id = ? AND is_default = 1", f.silo.id));
    return row->Int(0);
  });
  EXPECT_EQ(*defaults, 1);
}

TEST(DatastoreRace, ConcurrentDefaultLinksAdmitExactlyOne) {
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.0", "10.0.0.0", "pool-0");
  std::vector<Uuid> pools{f.pool.id};
  for (int i = 1; i <= kContenders; ++i) {
    std::string a = "10.0." + std::to_string(i) + ".0";
    pools.push_back(MakeFixture(*ds, a, a, "pool-" + std::to_string(i)).pool.id);
  }
  ForcedInterleaving race(*ds, "ip_pool_link:checked");
  std::atomic<int> linked{0};
  auto link = [&](size_t i) {
    auto r = Link(*ds, pools[i], NameOrId(f.silo.id), true);
    if (r) {
      ++linked;
    } else {
      EXPECT_EQ(r.error().ErrorCode(), "ObjectAlreadyExists");
    }
    return r.has_value();
  };
  race.Run(
      [&] {
        // SQLite's single writer lets the held link win; on PostgreSQL a contender may commit
        // first and the held one, retried, must then be refused.
        bool won = link(0);
        if (!ds.postgres()) {
          EXPECT_TRUE(won);
        }
      },
      [&](int i) { link(static_cast<size_t>(i) + 1); });
  EXPECT_EQ(linked.load(), 1);
  auto defaults = SiloPoolList(*ds, f.silo.id, {}, PageRequest{});
  int n = 0;
  for (const auto& p : *defaults) n += p.is_default ? 1 : 0;
  EXPECT_EQ(n, 1);
}

}  // namespace
}  // namespace fp::db
