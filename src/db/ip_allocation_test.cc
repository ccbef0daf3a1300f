#include "db/ip_allocation.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

#include "db/testing/temp_datastore.h"

namespace fp::db {
namespace {

using testing::CreateFip;
using testing::Explicit;
using testing::FromPool;
using testing::Ip;
using testing::MakeFixture;
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

}  // namespace
}  // namespace fp::db
