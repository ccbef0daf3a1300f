#include "db/ip_allocation.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "db/attach.h"
#include "db/instances.h"
#include "db/testing/temp_datastore.h"

namespace fp::db {
namespace {

using testing::CreateFip;
using testing::Explicit;
using testing::FromPool;
using testing::Ip;
using testing::MakeFixture;
using testing::OnPostgres;
using testing::Range;
using testing::TempDatastore;

Result<AllocatedAddress> Lowest(Datastore& ds, const Uuid& pool) {
  return ds.Write<AllocatedAddress>([&](Tx& tx) { return AllocateLowestAddress(tx, pool); });
}
Result<AllocatedAddress> Snat(Datastore& ds, const Uuid& pool) {
  return ds.Write<AllocatedAddress>([&](Tx& tx) { return AllocateSnatBlock(tx, pool); });
}
Result<AllocatedAddress> Exact(Datastore& ds, const Uuid& pool, const std::string& ip) {
  return ds.Write<AllocatedAddress>(
      [&](Tx& tx) { return AllocateExplicitAddress(tx, pool, Ip(ip)); });
}
Status Release(Datastore& ds, const Uuid& pool, const AllocatedAddress& a) {
  return ds
      .Write<bool>([&](Tx& tx) -> Result<bool> {
        FP_CHECK_OK(ReleaseAddress(tx, pool, a));
        return true;
      })
      .map([](bool) {});
}

// The pool's free spans, lowest first, as "first-last".
std::vector<std::string> Spans(Datastore& ds, const Uuid& pool) {
  return *ds.Read<std::vector<std::string>>([&](Tx& tx) -> Result<std::vector<std::string>> {
    std::vector<std::string> out;
    for (const Row& r : FP_TRY(tx.Query("SELECT first_address, last_address FROM ip_free_span "
                                        "WHERE pool_id = ? ORDER BY first_address",
                                        pool))) {
      out.push_back(FP_TRY(IpColumn(r, 0)).ToString() + "-" + FP_TRY(IpColumn(r, 1)).ToString());
    }
    return out;
  });
}

// The error message of `r`, or "succeeded".
template <typename T>
std::string Message(const Result<T>& r) {
  return r ? std::string("succeeded") : r.error().message();
}

// The round trips to the server of each of `ops`, run one after the other in one write
// transaction (PostgreSQL). The transaction's first statement goes in one exchange with its
// BEGIN and, the first time on a connection, its prepare (db/postgres/connection.cc); later
// statements, prepared already (a transaction keeps its connection throughout), one each.
std::vector<int64_t> RoundTrips(Datastore& ds, const std::vector<std::function<Status(Tx&)>>& ops) {
  std::vector<int64_t> out;
  Status s = ds.Write([&](Tx& tx) -> Status {
    out.clear();  // a retried transaction counts again
    for (const auto& op : ops) {
      int64_t before = ds.round_trips();
      FP_CHECK_OK(op(tx));
      out.push_back(ds.round_trips() - before);
    }
    return Ok();
  });
  EXPECT_TRUE(s) << s.error().message();
  return out;
}

constexpr const char* kRoundTripsOnPostgresOnly =
    "round trips are PostgreSQL's: SQLite runs in the process and has none";

TEST(IpAllocation, TakesLowestAddressAcrossRangesAndSkipsExhaustedOnes) {
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.5", "10.0.0.5");
  ASSERT_TRUE(RangeAdd(*ds, f.pool.id, Uuid::Random(), Range("10.0.0.1", "10.0.0.2")));
  EXPECT_EQ(Lowest(*ds, f.pool.id)->ip, Ip("10.0.0.1"));
  EXPECT_EQ(Lowest(*ds, f.pool.id)->ip, Ip("10.0.0.2"));
  // The lower range is exhausted; the next range still serves.
  EXPECT_EQ(Lowest(*ds, f.pool.id)->ip, Ip("10.0.0.5"));
  auto none = Lowest(*ds, f.pool.id);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().HttpStatus(), 507);
  EXPECT_EQ(none.error().message(), "Insufficient capacity: No external IP addresses available");
}

TEST(IpAllocation, ReleasedAddressIsReusedFirst) {
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.0", "10.0.0.9");
  std::vector<AllocatedAddress> got;
  for (int i = 0; i < 5; ++i) got.push_back(*Lowest(*ds, f.pool.id));
  ASSERT_TRUE(Release(*ds, f.pool.id, got[2]));
  EXPECT_EQ(Lowest(*ds, f.pool.id)->ip, Ip("10.0.0.2"));
  EXPECT_EQ(Lowest(*ds, f.pool.id)->ip, Ip("10.0.0.5"));
}

TEST(IpAllocation, ExplicitAddressMustBeWhollyFree) {
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.0", "10.0.0.3");
  ASSERT_TRUE(Exact(*ds, f.pool.id, "10.0.0.2"));
  auto again = Exact(*ds, f.pool.id, "10.0.0.2");
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().message(), "Requested external IP address not available");
  // An address carrying any SNAT block is not available to an explicit request: with block 0
  // free again but block 1 in use, (ip, first_port 0) would not collide, yet ports 0-65535
  // overlap block 1 (product.md difference 3).
  auto b0 = *Snat(*ds, f.pool.id);
  auto b1 = *Snat(*ds, f.pool.id);
  EXPECT_EQ(b0.ip, b1.ip);
  ASSERT_TRUE(Release(*ds, f.pool.id, b0));
  auto overlap = Exact(*ds, f.pool.id, b0.ip.ToString());
  ASSERT_FALSE(overlap);
  EXPECT_EQ(overlap.error().message(), "Requested external IP address not available");
}

TEST(IpAllocation, SnatBlocksFillAnAddressAndFreedBlocksAreReusedFirst) {
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.0", "10.0.0.0");
  auto a = *Snat(*ds, f.pool.id);
  auto b = *Snat(*ds, f.pool.id);
  EXPECT_EQ(a.first_port, 0);
  EXPECT_EQ(a.last_port, 16383);
  EXPECT_EQ(b.first_port, 16384);
  ASSERT_TRUE(Release(*ds, f.pool.id, a));
  EXPECT_EQ(Snat(*ds, f.pool.id)->first_port, 0);
  EXPECT_EQ(Snat(*ds, f.pool.id)->first_port, 32768);
  EXPECT_EQ(Snat(*ds, f.pool.id)->first_port, 49152);
  // Four blocks used: the single address is exhausted for SNAT and for whole addresses.
  EXPECT_EQ(Snat(*ds, f.pool.id).error().HttpStatus(), 507);
  EXPECT_EQ(Lowest(*ds, f.pool.id).error().HttpStatus(), 507);
}

TEST(IpAllocation, SnatPrefersALowerWhollyFreeAddress) {
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.0", "10.0.0.1");
  auto low = *Lowest(*ds, f.pool.id);  // 10.0.0.0 whole
  auto snat = *Snat(*ds, f.pool.id);   // 10.0.0.1 block 0
  EXPECT_EQ(snat.ip, Ip("10.0.0.1"));
  ASSERT_TRUE(Release(*ds, f.pool.id, low));
  auto next = *Snat(*ds, f.pool.id);
  EXPECT_EQ(next.ip, Ip("10.0.0.0"));
  EXPECT_EQ(next.first_port, 0);
}

TEST(IpAllocation, WholeAddressNeverTakesAnAddressWithSnat) {
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.0", "10.0.0.1");
  auto snat = *Snat(*ds, f.pool.id);
  EXPECT_EQ(snat.ip, Ip("10.0.0.0"));
  EXPECT_EQ(Lowest(*ds, f.pool.id)->ip, Ip("10.0.0.1"));
  EXPECT_EQ(Lowest(*ds, f.pool.id).error().HttpStatus(), 507);
}

TEST(IpAllocation, Ipv6RangesAllocateAndMergeOnRelease) {
  TempDatastore ds;
  auto f = MakeFixture(*ds, "fdff:ffff:ffff:ffff:ffff:ffff:ffff:fffe",
                       "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "v6pool", IpVersion::kV6);
  auto a = *Lowest(*ds, f.pool.id);
  auto b = *Lowest(*ds, f.pool.id);
  EXPECT_EQ(b.ip.ToString(), "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff");
  ASSERT_TRUE(Release(*ds, f.pool.id, b));
  ASSERT_TRUE(Release(*ds, f.pool.id, a));
  EXPECT_EQ(Utilization(*ds, f.pool.id)->remaining, 2.0);
}

// Random allocations and releases agree with a simple model: the lowest free address is
// always what AllocateLowestAddress returns, and utilization counts what is free.
TEST(IpAllocation, AgreesWithAModelUnderRandomChurn) {
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.1.0.0", "10.1.0.63");
  ASSERT_TRUE(RangeAdd(*ds, f.pool.id, Uuid::Random(), Range("10.1.1.0", "10.1.1.31")));
  std::set<IpAddr> free_model;
  for (int i = 0; i < 64; ++i)
    free_model.insert(IpAddr(IpVersion::kV4, Ip("10.1.0.0").value() + i));
  for (int i = 0; i < 32; ++i)
    free_model.insert(IpAddr(IpVersion::kV4, Ip("10.1.1.0").value() + i));
  std::map<IpAddr, AllocatedAddress> held;
  std::mt19937 rng(42);
  for (int step = 0; step < 600; ++step) {
    bool allocate = held.empty() || (!free_model.empty() && rng() % 3 != 0);
    if (allocate) {
      auto got = Lowest(*ds, f.pool.id);
      ASSERT_TRUE(got) << got.error().message();
      ASSERT_EQ(got->ip, *free_model.begin()) << "step " << step;
      free_model.erase(free_model.begin());
      held.emplace(got->ip, *got);
    } else {
      auto it = held.begin();
      std::advance(it, static_cast<long>(rng() % held.size()));
      ASSERT_TRUE(Release(*ds, f.pool.id, it->second));
      free_model.insert(it->first);
      held.erase(it);
    }
    if (step % 50 == 0) {
      EXPECT_EQ(Utilization(*ds, f.pool.id)->remaining, static_cast<double>(free_model.size()));
    }
  }
}

TEST(IpAllocation, ExplicitAddressInsideASpanSplitsIt) {
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.0", "10.0.0.9");
  auto mid = Exact(*ds, f.pool.id, "10.0.0.5");
  ASSERT_TRUE(mid) << mid.error().message();
  EXPECT_EQ(mid->range_id, f.range.id);
  EXPECT_EQ(mid->first_port, 0);
  EXPECT_EQ(mid->last_port, 65535);
  EXPECT_EQ(Spans(*ds, f.pool.id),
            (std::vector<std::string>{"10.0.0.0-10.0.0.4", "10.0.0.6-10.0.0.9"}));
  // The ends of the remainders.
  ASSERT_TRUE(Exact(*ds, f.pool.id, "10.0.0.4"));
  ASSERT_TRUE(Exact(*ds, f.pool.id, "10.0.0.6"));
  ASSERT_TRUE(Exact(*ds, f.pool.id, "10.0.0.9"));
  EXPECT_EQ(Spans(*ds, f.pool.id),
            (std::vector<std::string>{"10.0.0.0-10.0.0.3", "10.0.0.7-10.0.0.8"}));
  EXPECT_EQ(Message(Exact(*ds, f.pool.id, "10.0.0.5")),
            "Requested external IP address not available");
  EXPECT_EQ(Message(Exact(*ds, f.pool.id, "10.0.0.10")),
            "Requested external IP address not available");
  EXPECT_EQ(Lowest(*ds, f.pool.id)->ip, Ip("10.0.0.0"));
}

TEST(IpAllocation, ReleaseMergesWithBothNeighbours) {
  TempDatastore ds;
  // Across a byte boundary: the neighbours of 10.0.1.0 are 10.0.0.255 and 10.0.1.1.
  auto f = MakeFixture(*ds, "10.0.0.250", "10.0.1.5");
  auto a = *Exact(*ds, f.pool.id, "10.0.1.0");
  EXPECT_EQ(Spans(*ds, f.pool.id),
            (std::vector<std::string>{"10.0.0.250-10.0.0.255", "10.0.1.1-10.0.1.5"}));
  ASSERT_TRUE(Release(*ds, f.pool.id, a));
  EXPECT_EQ(Spans(*ds, f.pool.id), (std::vector<std::string>{"10.0.0.250-10.0.1.5"}));
  // Only a left neighbour, then only a right one.
  auto last = *Exact(*ds, f.pool.id, "10.0.1.5");
  auto first = *Lowest(*ds, f.pool.id);
  EXPECT_EQ(first.ip, Ip("10.0.0.250"));
  ASSERT_TRUE(Release(*ds, f.pool.id, last));
  ASSERT_TRUE(Release(*ds, f.pool.id, first));
  EXPECT_EQ(Spans(*ds, f.pool.id), (std::vector<std::string>{"10.0.0.250-10.0.1.5"}));
}

TEST(IpAllocation, Ipv6ExplicitAddressSplitsAndReleaseMergesAcrossAByte) {
  TempDatastore ds;
  auto f = MakeFixture(*ds, "fd00::ff", "fd00::101", "v6pool", IpVersion::kV6);
  auto a = Exact(*ds, f.pool.id, "fd00::100");
  ASSERT_TRUE(a) << a.error().message();
  EXPECT_EQ(Spans(*ds, f.pool.id),
            (std::vector<std::string>{"fd00::ff-fd00::ff", "fd00::101-fd00::101"}));
  EXPECT_EQ(Message(Exact(*ds, f.pool.id, "fd00::100")),
            "Requested external IP address not available");
  ASSERT_TRUE(Release(*ds, f.pool.id, *a));
  EXPECT_EQ(Spans(*ds, f.pool.id), (std::vector<std::string>{"fd00::ff-fd00::101"}));
  EXPECT_EQ(Lowest(*ds, f.pool.id)->ip, Ip("fd00::ff"));
}

TEST(IpAllocation, SnatTakesAPartlyUsedAddressBelowTheLowestFreeOne) {
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.0", "10.0.0.3");
  auto b0 = *Snat(*ds, f.pool.id);
  EXPECT_EQ(b0.ip, Ip("10.0.0.0"));
  auto whole = *Lowest(*ds, f.pool.id);
  EXPECT_EQ(whole.ip, Ip("10.0.0.1"));
  // 10.0.0.0 (partly used) is below the lowest free address 10.0.0.2.
  auto b1 = *Snat(*ds, f.pool.id);
  EXPECT_EQ(b1.ip, Ip("10.0.0.0"));
  EXPECT_EQ(b1.first_port, 16384);
  EXPECT_EQ(b1.last_port, 32767);
  EXPECT_EQ(b1.range_id, f.range.id);
  // Still below once 10.0.0.1 is free again.
  ASSERT_TRUE(Release(*ds, f.pool.id, whole));
  auto b2 = *Snat(*ds, f.pool.id);
  EXPECT_EQ(b2.ip, Ip("10.0.0.0"));
  EXPECT_EQ(b2.first_port, 32768);
  // An SNAT address whose last block is released goes back to the spans, merged.
  ASSERT_TRUE(Release(*ds, f.pool.id, b0));
  ASSERT_TRUE(Release(*ds, f.pool.id, b1));
  EXPECT_EQ(Spans(*ds, f.pool.id), (std::vector<std::string>{"10.0.0.1-10.0.0.3"}));
  ASSERT_TRUE(Release(*ds, f.pool.id, b2));
  EXPECT_EQ(Spans(*ds, f.pool.id), (std::vector<std::string>{"10.0.0.0-10.0.0.3"}));
  // Releasing a block of an address without SNAT is the internal error it always was.
  auto unrecorded = Release(*ds, f.pool.id, b2);
  ASSERT_FALSE(unrecorded);
  EXPECT_EQ(unrecorded.error().HttpStatus(), 500);
  EXPECT_NE(
      unrecorded.error().message().find("SNAT block 10.0.0.0:32768 released but not recorded"),
      std::string::npos)
      << unrecorded.error().message();
}

// On PostgreSQL each allocation and release is one statement: one round trip once prepared.
TEST(IpAllocationRoundTrips, LowestAddressIsOneRoundTrip) {
  if (!OnPostgres()) GTEST_SKIP() << kRoundTripsOnPostgresOnly;
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.0", "10.0.0.1");
  auto lowest = [&](Tx& tx) -> Status {
    return AllocateLowestAddress(tx, f.pool.id).map([](auto) {});
  };
  auto exhausted = [&](Tx& tx) -> Status {
    EXPECT_EQ(AllocateLowestAddress(tx, f.pool.id).error().HttpStatus(), 507);
    return Ok();
  };
  EXPECT_EQ(RoundTrips(*ds, {lowest, lowest, exhausted}), (std::vector<int64_t>{1, 1, 1}))
      << "BEGIN + prepare + execute, then execute only";
}

TEST(IpAllocationRoundTrips, ExplicitAddressIsOneRoundTrip) {
  if (!OnPostgres()) GTEST_SKIP() << kRoundTripsOnPostgresOnly;
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.0", "10.0.0.9");
  auto take = [&](const char* ip) {
    return [&f, ip](Tx& tx) -> Status {
      return AllocateExplicitAddress(tx, f.pool.id, Ip(ip)).map([](auto) {});
    };
  };
  auto taken = [&](Tx& tx) -> Status {
    EXPECT_EQ(AllocateExplicitAddress(tx, f.pool.id, Ip("10.0.0.5")).error().HttpStatus(), 400);
    return Ok();
  };
  EXPECT_EQ(RoundTrips(*ds, {take("10.0.0.5"), take("10.0.0.6"), taken}),
            (std::vector<int64_t>{1, 1, 1}))
      << "BEGIN + prepare + execute, then execute only";
}

TEST(IpAllocationRoundTrips, SnatBlockIsOneRoundTrip) {
  if (!OnPostgres()) GTEST_SKIP() << kRoundTripsOnPostgresOnly;
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.0", "10.0.0.1");
  auto snat = [&](Tx& tx) -> Status { return AllocateSnatBlock(tx, f.pool.id).map([](auto) {}); };
  // A wholly free address, then a block of the partly used one.
  EXPECT_EQ(RoundTrips(*ds, {snat, snat, snat}), (std::vector<int64_t>{1, 1, 1}))
      << "BEGIN + prepare + execute, then execute only";
}

TEST(IpAllocationRoundTrips, ReleaseIsOneRoundTrip) {
  if (!OnPostgres()) GTEST_SKIP() << kRoundTripsOnPostgresOnly;
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.0", "10.0.0.9");
  auto a = *Lowest(*ds, f.pool.id);
  auto b = *Lowest(*ds, f.pool.id);
  auto s0 = *Snat(*ds, f.pool.id);
  auto s1 = *Snat(*ds, f.pool.id);
  auto release = [&](const AllocatedAddress& x) {
    return [&f, x](Tx& tx) -> Status { return ReleaseAddress(tx, f.pool.id, x); };
  };
  // A whole address with a free right neighbour, one with neighbours on both sides, an SNAT
  // block of an address still in use, the last block of an address.
  EXPECT_EQ(RoundTrips(*ds, {release(b), release(a), release(s0), release(s1)}),
            (std::vector<int64_t>{1, 1, 1, 1}))
      << "BEGIN + prepare + execute, then execute only";
  EXPECT_EQ(Spans(*ds, f.pool.id), (std::vector<std::string>{"10.0.0.0-10.0.0.9"}));
}

TEST(FloatingIpAllocation, ExplicitPoolNeverFallsBackToAnotherPool) {
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.0", "10.0.0.0", "small");
  auto big = MakeFixture(*ds, "10.9.0.0", "10.9.0.255", "big");
  ASSERT_TRUE(Link(*ds, f.pool.id, NameOrId(f.silo.id), true));
  ASSERT_TRUE(Link(*ds, big.pool.id, NameOrId(f.silo.id), false));
  ASSERT_TRUE(CreateFip(*ds, f, "a", FromPool("small")));
  auto second = CreateFip(*ds, f, "b", FromPool("small"));
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().HttpStatus(), 507);
  // The default selector is the exhausted default pool too: no fallback.
  EXPECT_EQ(CreateFip(*ds, f, "c").error().HttpStatus(), 507);
  EXPECT_EQ(Utilization(*ds, big.pool.id)->remaining, 256.0);
}

TEST(FloatingIpAllocation, PoolResolutionErrorsMatchTheApi) {
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.0", "10.0.0.255", "unlinked");
  auto unlinked = CreateFip(*ds, f, "a", FromPool("unlinked"));
  EXPECT_EQ(unlinked.error().message(), "not found: ip-pool with name \"unlinked\"");
  auto no_default = CreateFip(*ds, f, "a");
  EXPECT_EQ(no_default.error().message(), "not found: default unicast IP pool for current silo");
  auto outside = CreateFip(*ds, f, "a", Explicit("192.168.1.100"));
  EXPECT_EQ(outside.error().message(), "IP address 192.168.1.100 is not in any configured pool");
  // In a range, but the pool is not linked to the caller's silo.
  auto not_linked = CreateFip(*ds, f, "a", Explicit("10.0.0.7"));
  EXPECT_EQ(not_linked.error().message(), "IP address 10.0.0.7 is not in any configured pool");
  ASSERT_TRUE(Link(*ds, f.pool.id, NameOrId(f.silo.id), false));
  auto ok = CreateFip(*ds, f, "a", Explicit("10.0.0.7"));
  ASSERT_TRUE(ok) << ok.error().message();
  EXPECT_EQ(ok->pool_id, f.pool.id);
}

TEST(FloatingIpAllocation, DeleteReturnsTheAddressAndNameIsReusable) {
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.0", "10.0.0.0");
  ASSERT_TRUE(Link(*ds, f.pool.id, NameOrId(f.silo.id), true));
  auto fip = *CreateFip(*ds, f, "web");
  EXPECT_EQ(CreateFip(*ds, f, "web").error().message(), "already exists: floating-ip \"web\"");
  ASSERT_TRUE(FloatingIpDelete(*ds, fip.id));
  EXPECT_EQ(FloatingIpDelete(*ds, fip.id).error().HttpStatus(), 404);
  auto again = CreateFip(*ds, f, "web");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->ip, fip.ip);
  EXPECT_NE(again->id, fip.id);
}

TEST(FloatingIpAllocation, DeleteIsRefusedWhileAttachedNamingTheInstance) {
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.0", "10.0.0.3");
  ASSERT_TRUE(Link(*ds, f.pool.id, NameOrId(f.silo.id), true));
  auto fip = *CreateFip(*ds, f, "web");
  InstanceCreate c;
  c.id = Uuid::Random();
  c.nic_id = Uuid::Random();
  c.project_id = f.project.id;
  c.name = "vm-1";
  c.hostname = "vm-1";
  c.memory = int64_t{1} << 30;
  c.nic = NicKind::kIpv4;
  AttachRequest r;
  r.ip_id = fip.id;
  r.instance_id = c.id;
  r.saga_id = Uuid::Random();
  r.creating = true;
  ASSERT_TRUE(ds->Write([&](Tx& tx) -> Status {
    FP_TRY(InstanceCreateRecordIn(tx, c));
    FP_TRY(BeginAttachIn(tx, r));
    return Ok();
  }));
  auto attaching = FloatingIpDelete(*ds, fip.id);
  ASSERT_FALSE(attaching);
  EXPECT_EQ(attaching.error().HttpStatus(), 400);
  EXPECT_EQ(attaching.error().message(),
            "Floating IP cannot be deleted while attached to an instance (floating IP \"web\" is "
            "being attached to instance \"vm-1\"; detach it first)");
  ASSERT_TRUE(ds->Write([&](Tx& tx) -> Status {
    FP_TRY(CompleteOpIn(tx, fip.id, AttachState::kAttaching, AttachState::kAttached));
    return Ok();
  }));
  EXPECT_EQ(FloatingIpDelete(*ds, fip.id).error().message(),
            "Floating IP cannot be deleted while attached to an instance (floating IP \"web\" is "
            "attached to instance \"vm-1\"; detach it first)");
  // Nothing changed: the IP is live and its address still taken.
  EXPECT_TRUE(FloatingIpLookupById(*ds, f.silo.id, fip.id));
  EXPECT_EQ(Utilization(*ds, f.pool.id)->remaining, 3.0);
}

// On PostgreSQL a floating IP's delete (check, soft delete, release) is one statement.
TEST(FloatingIpAllocation, DeleteIsOneRoundTrip) {
  if (!OnPostgres()) GTEST_SKIP() << kRoundTripsOnPostgresOnly;
  TempDatastore ds;
  auto f = MakeFixture(*ds, "10.0.0.0", "10.0.0.3");
  ASSERT_TRUE(Link(*ds, f.pool.id, NameOrId(f.silo.id), true));
  auto a = *CreateFip(*ds, f, "a");
  auto b = *CreateFip(*ds, f, "b");
  auto del = [](const Uuid& id) {
    return [id](Tx& tx) -> Status { return FloatingIpDeleteIn(tx, id, {}); };
  };
  auto gone = [&](Tx& tx) -> Status {
    EXPECT_EQ(FloatingIpDeleteIn(tx, a.id, {}).error().HttpStatus(), 404);
    return Ok();
  };
  EXPECT_EQ(RoundTrips(*ds, {del(a.id), del(b.id), gone}), (std::vector<int64_t>{1, 1, 1}))
      << "BEGIN + prepare + execute, then execute only";
  EXPECT_EQ(Utilization(*ds, f.pool.id)->remaining, 4.0);
}

}  // namespace
}  // namespace fp::db
