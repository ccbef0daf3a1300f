#include "app/ephemeral_ip_requests.h"

#include <gtest/gtest.h>

#include "app/testing/services.h"

namespace fp::app {
namespace {

using Mode = model::PoolSelector::Mode;

RequestedExternalIp Auto(std::optional<IpVersion> version) {
  model::PoolSelector s;
  s.mode = Mode::kDefault;
  s.ip_version = version;
  return RequestedExternalIp{true, s, NameOrId(Uuid())};
}

RequestedExternalIp Explicit(const std::string& pool) {
  model::PoolSelector s;
  s.mode = Mode::kExplicitPool;
  s.pool = NameOrId(*Name::Parse(pool));
  return RequestedExternalIp{true, s, NameOrId(Uuid())};
}

RequestedExternalIp Floating() {
  return RequestedExternalIp{false, {}, NameOrId(*Name::Parse("fip"))};
}

class EphemeralIpRequestsTest : public ::testing::Test {
 protected:
  std::string Check(const std::vector<RequestedExternalIp>& requested) {
    Status s = CheckEphemeralIpRequests(app_.ip_pools, actor_, requested);
    return s ? "ok" : s.error().message();
  }

  testing::TempServices app_;
  Actor actor_{Uuid::Random(), Uuid::Random(), model::Role::kSiloAdmin};
};

TEST_F(EphemeralIpRequestsTest, OneOfEachVersionOrOneAloneIsAccepted) {
  EXPECT_EQ(Check({}), "ok");
  EXPECT_EQ(Check({Auto(std::nullopt)}), "ok");
  EXPECT_EQ(Check({Auto(IpVersion::kV4), Auto(IpVersion::kV6)}), "ok");
  // Floating IPs do not count.
  EXPECT_EQ(Check({Auto(std::nullopt), Floating(), Floating()}), "ok");
}

TEST_F(EphemeralIpRequestsTest, OxidesRulesInItsWords) {
  EXPECT_EQ(Check({Auto(IpVersion::kV4), Auto(IpVersion::kV6), Auto(IpVersion::kV4)}),
            "An instance may not have more than 2 ephemeral IP addresses");
  EXPECT_EQ(Check({Auto(std::nullopt), Auto(IpVersion::kV6)}),
            "when requesting two ephemeral IPs, IP version or explicit pool name must be "
            "specified on each");
  EXPECT_EQ(Check({Auto(IpVersion::kV6), Auto(IpVersion::kV6)}),
            "cannot request two ephemeral IPs of the same version (v6)");
  EXPECT_EQ(Check({Explicit("p1"), Explicit("p1")}),
            "cannot request two ephemeral IPs from the same pool");
}

TEST_F(EphemeralIpRequestsTest, AnExplicitPoolsVersionIsLookedUpInTheActorsSilo) {
  Status s =
      CheckEphemeralIpRequests(app_.ip_pools, actor_, {Explicit("nowhere"), Auto(IpVersion::kV4)});
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind(), ErrorKind::kNotFound);
}

}  // namespace
}  // namespace fp::app
