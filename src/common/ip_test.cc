#include "common/ip.h"

#include <gtest/gtest.h>

namespace fp {
namespace {

TEST(IpAddr, ParsesAndFormatsBothVersions) {
  EXPECT_EQ(IpAddr::Parse("10.0.12.34")->ToString(), "10.0.12.34");
  EXPECT_EQ(IpAddr::Parse("FD00:0::1")->ToString(), "fd00::1");
  EXPECT_EQ(IpAddr::Parse("10.0.0.1")->version(), IpVersion::kV4);
  EXPECT_EQ(IpAddr::Parse("::1")->version(), IpVersion::kV6);
}

TEST(IpAddr, RejectsMalformedText) {
  for (const char* bad :
       {"", "10.0.0", "10.0.0.256", "1.2.3.4.5", "fd00:::1", "abc", " 10.0.0.1", "10.0.0.1/24"}) {
    auto r = IpAddr::Parse(bad);
    EXPECT_FALSE(r) << bad;
    if (!r) {
      EXPECT_EQ(r.error().kind(), ErrorKind::kInvalidRequest);
    }
  }
}

TEST(IpAddr, KeyOrderIsAddressOrderAndPutsV4BeforeV6) {
  auto a = *IpAddr::Parse("9.255.255.255");
  auto b = *IpAddr::Parse("10.0.0.0");
  auto c = *IpAddr::Parse("::");
  auto d = *IpAddr::Parse("fd00::1");
  EXPECT_LT(a.Key(), b.Key());
  EXPECT_LT(b.Key(), c.Key());
  EXPECT_LT(c.Key(), d.Key());
  for (const auto& ip : {a, b, c, d}) EXPECT_EQ(*IpAddr::FromKey(ip.Key()), ip);
  EXPECT_FALSE(IpAddr::FromKey("xyz"));
}

TEST(IpRange, ValidatesOrderAndVersion) {
  auto v4 = *IpAddr::Parse("10.0.0.5");
  auto v4b = *IpAddr::Parse("10.0.0.1");
  auto v6 = *IpAddr::Parse("fd00::1");
  EXPECT_EQ(IpRange::Make(v4, v4b).error().message(), "IP address ranges must be non-decreasing");
  EXPECT_FALSE(IpRange::Make(v4, v6));
  auto r = *IpRange::Make(v4b, v4);
  EXPECT_EQ(r.SizeAsDouble(), 5.0);
  EXPECT_TRUE(r.Contains(*IpAddr::Parse("10.0.0.3")));
  EXPECT_FALSE(r.Contains(*IpAddr::Parse("10.0.0.6")));
  auto full6 = *IpRange::Make(*IpAddr::Parse("::"),
                              *IpAddr::Parse("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"));
  EXPECT_GT(full6.SizeAsDouble(), 3.4e38);
}

}  // namespace
}  // namespace fp
