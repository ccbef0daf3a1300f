// IP quotas: enforced in the allocating transaction, exact under racing allocations on both
// engines (PostgreSQL when FLOATPLANE_TEST_POSTGRES is set), counted by kind.

#include "db/quotas.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "db/attach.h"
#include "db/external_ips.h"
#include "db/instances.h"
#include "db/ip_pools.h"
#include "db/projects.h"
#include "db/snat.h"
#include "db/testing/temp_datastore.h"

namespace fp::db {
namespace {

using testing::CreateFip;
using testing::Fixture;
using testing::MakeFixture;
using testing::TempDatastore;

class QuotaTest : public ::testing::Test {
 protected:
  // 64 addresses: quotas, not the pool, are what run out.
  void SetUp() override {
    f_ = MakeFixture(*ds_, "10.0.0.1", "10.0.0.64");
    ASSERT_TRUE(Link(*ds_, f_.pool.id, NameOrId(f_.silo.id), /*is_default=*/true));
  }

  void SetProjectLimit(const Uuid& project, std::optional<int64_t> ipv4) {
    model::ProjectQuotasUpdate u;
    u.ipv4 = ipv4;
    ASSERT_TRUE(ProjectQuotasUpdate(*ds_, project, u));
  }
  void SetSiloLimit(std::optional<int64_t> ipv4) {
    model::SiloQuotasUpdate u;
    u.ipv4 = ipv4;
    ASSERT_TRUE(SiloQuotasUpdate(*ds_, f_.silo.id, u));
  }
  int64_t ProjectUse(const Uuid& project) {
    return ProjectQuotasView(*ds_, project).value().ip_use.ipv4_quarters;
  }
  int64_t SiloUse() { return SiloQuotasView(*ds_, f_.silo.id).value().ip_use.ipv4_quarters; }

  // An instance of `project` with the SNAT block instance create gives it.
  Result<Uuid> NewInstanceWithSnat(const Uuid& project, const std::string& name) {
    model::InstanceCreate c;
    c.id = Uuid::Random();
    c.nic_id = Uuid::Random();
    c.project_id = project;
    c.name = name;
    c.hostname = name;
    c.memory = int64_t{1} << 30;
    return ds_->Write<Uuid>([&](Tx& tx) -> Result<Uuid> {
      FP_TRY(InstanceCreateRecordIn(tx, c));
      FP_TRY(SnatAllocateIn(tx, Uuid::Random(), c.id, f_.silo.id));
      return c.id;
    });
  }

  // `threads` threads each creating `each` floating IPs in `projects` (round robin) at once;
  // returns how many were created, and expects every refusal to be a QuotaExceeded.
  int RacingCreates(const std::vector<Uuid>& projects, int threads, int each) {
    std::atomic<int> created{0};
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        for (int i = 0; i < each; ++i) {
          Fixture f = f_;
          f.project.id = projects[(t + i) % projects.size()];
          auto ip = CreateFip(*ds_, f, "ip-" + std::to_string(t) + "-" + std::to_string(i));
          if (ip) {
            ++created;
          } else {
            EXPECT_EQ(ip.error().kind(), ErrorKind::kQuotaExceeded) << ip.error().message();
          }
        }
      });
    }
    for (auto& w : workers) w.join();
    return created.load();
  }

  TempDatastore ds_;
  Fixture f_;
};

TEST_F(QuotaTest, RacingAllocationsStopExactlyAtTheProjectQuota) {
  SetProjectLimit(f_.project.id, 5);
  EXPECT_EQ(RacingCreates({f_.project.id}, 8, 3), 5);
  EXPECT_EQ(ProjectUse(f_.project.id), 5 * model::kQuartersPerAddress);
  auto refused = CreateFip(*ds_, f_, "one-more");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().HttpStatus(), 400);
  EXPECT_EQ(refused.error().ErrorCode(), "QuotaExceeded");
  EXPECT_EQ(refused.error().message(),
            "IPv4 address quota of project \"p1\" exceeded: its limit is 5, 5 in use, and the "
            "floating IP \"one-more\" needs 1 more; release addresses or ask a silo admin to "
            "raise it");
}

TEST_F(QuotaTest, RacingAllocationsOfTwoProjectsStopExactlyAtTheSiloQuota) {
  Uuid other = ProjectCreate(*ds_, Uuid::Random(), f_.silo.id, "p2", "").value().id;
  SetSiloLimit(3);
  EXPECT_EQ(RacingCreates({f_.project.id, other}, 8, 2), 3);
  EXPECT_EQ(SiloUse(), 3 * model::kQuartersPerAddress);
  EXPECT_EQ(ProjectUse(f_.project.id) + ProjectUse(other), 3 * model::kQuartersPerAddress);
  auto refused = CreateFip(*ds_, f_, "one-more");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message(),
            "IPv4 address quota of silo \"s1\" exceeded: its limit is 3, 3 in use, and the "
            "floating IP \"one-more\" needs 1 more; release addresses or ask a fleet admin to "
            "raise it");
}

TEST_F(QuotaTest, AnSnatBlockCountsAQuarterOfAnAddress) {
  SetProjectLimit(f_.project.id, 1);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(NewInstanceWithSnat(f_.project.id, "vm" + std::to_string(i)));
  }
  EXPECT_EQ(ProjectUse(f_.project.id), 4);
  auto fifth = NewInstanceWithSnat(f_.project.id, "vm4");
  ASSERT_FALSE(fifth);
  EXPECT_EQ(fifth.error().message(),
            "IPv4 address quota of project \"p1\" exceeded: its limit is 1, 1 in use, and the "
            "instance's SNAT block needs 0.25 more; release addresses or ask a silo admin to "
            "raise it");

  SetProjectLimit(f_.project.id, 2);
  ASSERT_TRUE(NewInstanceWithSnat(f_.project.id, "vm4"));
  auto whole = CreateFip(*ds_, f_, "web");
  ASSERT_FALSE(whole) << "1.25 in use: a whole address more would be 2.25";
  EXPECT_NE(whole.error().message().find("its limit is 2, 1.25 in use"), std::string::npos)
      << whole.error().message();
}

TEST_F(QuotaTest, AnEphemeralIpCountsAgainstItsInstancesProject) {
  Uuid vm = NewInstanceWithSnat(f_.project.id, "vm").value();
  SetProjectLimit(f_.project.id, 1);  // 0.25 held by the SNAT block
  PoolSelector selector;
  selector.mode = PoolSelector::Mode::kExplicitPool;
  selector.pool = testing::ByName("pool");
  auto refused = ds_->Write<ExternalIp>(
      [&](Tx& tx) { return EphemeralAllocateIn(tx, Uuid::Random(), vm, f_.silo.id, selector); });
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message(),
            "IPv4 address quota of project \"p1\" exceeded: its limit is 1, 0.25 in use, and an "
            "ephemeral IP needs 1 more; release addresses or ask a silo admin to raise it");
  SetProjectLimit(f_.project.id, 2);
  ASSERT_TRUE(ds_->Write<ExternalIp>(
      [&](Tx& tx) { return EphemeralAllocateIn(tx, Uuid::Random(), vm, f_.silo.id, selector); }));
  // Detached (not yet attached, as mid-saga), it counts already.
  EXPECT_EQ(ProjectUse(f_.project.id), 5);
  EXPECT_EQ(SiloUse(), 5);
}

TEST_F(QuotaTest, ALimitLoweredBelowUseRefusesNewAllocationsAndFreesNothing) {
  ASSERT_TRUE(CreateFip(*ds_, f_, "a"));
  ASSERT_TRUE(CreateFip(*ds_, f_, "b"));
  ASSERT_TRUE(CreateFip(*ds_, f_, "c"));
  SetProjectLimit(f_.project.id, 1);
  EXPECT_EQ(ProjectUse(f_.project.id), 12);
  auto refused = CreateFip(*ds_, f_, "d");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("its limit is 1, 3 in use"), std::string::npos);
  // Released addresses no longer count; the limit is reached again only below it.
  Uuid a = FloatingIpLookupByName(*ds_, f_.project.id, "a").value().id;
  ASSERT_TRUE(FloatingIpDelete(*ds_, a));
  EXPECT_EQ(ProjectUse(f_.project.id), 8);
  EXPECT_FALSE(CreateFip(*ds_, f_, "d"));
  // Removing the limit (null) lets it allocate again.
  SetProjectLimit(f_.project.id, std::nullopt);
  EXPECT_TRUE(CreateFip(*ds_, f_, "d"));
  EXPECT_FALSE(ProjectQuotasView(*ds_, f_.project.id).value().ip.ipv4.has_value());
}

TEST_F(QuotaTest, ATransferIsCheckedAgainstTheTargetProjectOnly) {
  Uuid other = ProjectCreate(*ds_, Uuid::Random(), f_.silo.id, "p2", "").value().id;
  Uuid ip = CreateFip(*ds_, f_, "moving").value().id;
  ASSERT_TRUE(CreateFip(*ds_, f_, "staying"));
  SetProjectLimit(other, 0);
  SetSiloLimit(2);  // full, but the address is the silo's already
  auto refused = FloatingIpTransfer(*ds_, ip, other);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message(),
            "IPv4 address quota of project \"p2\" exceeded: its limit is 0, 0 in use, and the "
            "floating IP \"moving\" needs 1 more; release addresses or ask a silo admin to "
            "raise it");
  SetProjectLimit(other, 1);
  ASSERT_TRUE(FloatingIpTransfer(*ds_, ip, other));
  EXPECT_EQ(ProjectUse(other), 4);
  EXPECT_EQ(ProjectUse(f_.project.id), 4);
  EXPECT_EQ(SiloUse(), 8);
}

TEST_F(QuotaTest, IpVersionsHaveQuotasOfTheirOwn) {
  Fixture v6 = MakeFixture(*ds_, "fd00::1", "fd00::ff", "pool6", IpVersion::kV6);
  ASSERT_TRUE(Link(*ds_, v6.pool.id, NameOrId(f_.silo.id), /*is_default=*/false));
  model::ProjectQuotasUpdate u;
  u.ipv4 = 0;
  ASSERT_TRUE(ProjectQuotasUpdate(*ds_, f_.project.id, u));
  EXPECT_FALSE(CreateFip(*ds_, f_, "four"));
  ASSERT_TRUE(CreateFip(*ds_, f_, "six", testing::FromPool("pool6")));
  model::ProjectQuotas q = ProjectQuotasView(*ds_, f_.project.id).value();
  EXPECT_EQ(q.ip_use.ipv4_quarters, 0);
  EXPECT_EQ(q.ip_use.ipv6_quarters, 4);
  u = {};
  u.ipv6 = 1;
  ASSERT_TRUE(ProjectQuotasUpdate(*ds_, f_.project.id, u));
  auto refused = CreateFip(*ds_, f_, "six-more", testing::FromPool("pool6"));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message(),
            "IPv6 address quota of project \"p1\" exceeded: its limit is 1, 1 in use, and the "
            "floating IP \"six-more\" needs 1 more; release addresses or ask a silo admin to "
            "raise it");
  EXPECT_EQ(ProjectQuotasView(*ds_, f_.project.id).value().ip.ipv4, 0) << "left as it was";
}

}  // namespace
}  // namespace fp::db
