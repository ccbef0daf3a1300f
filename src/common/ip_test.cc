#include "common/ip.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <array>
#include <random>
#include <string>

namespace fp {
namespace {

// What the C library writes for the address.
std::string NtopText(const IpAddr& ip) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ip.version() == IpVersion::kV4) {
    in_addr a{};
    a.s_addr = htonl(static_cast<uint32_t>(ip.value()));
    inet_ntop(AF_INET, &a, buf, sizeof buf);
  } else {
    in6_addr a{};
    uint128 v = ip.value();
    for (int i = 15; i >= 0; --i) {
      a.s6_addr[i] = static_cast<uint8_t>(v & 0xff);
      v >>= 8;
    }
    inet_ntop(AF_INET6, &a, buf, sizeof buf);
  }
  return buf;
}

IpAddr V6(const std::array<unsigned, 8>& groups) {
  uint128 v = 0;
  for (unsigned g : groups) v = (v << 16) | g;
  return IpAddr(IpVersion::kV6, v);
}

TEST(IpAddr, WritesTheTextInetNtopWrites) {
  std::mt19937_64 rng(26);
  int compared = 0;
  auto check = [&](const IpAddr& ip) {
    EXPECT_EQ(ip.ToString(), NtopText(ip));
    ++compared;
  };
  // Every octet value in every place of an IPv4 address.
  for (unsigned place = 0; place < 4; ++place) {
    for (unsigned octet = 0; octet < 256; ++octet) {
      check(IpAddr(IpVersion::kV4, uint128{octet} << (8 * place)));
      check(IpAddr(IpVersion::kV4, (uint128{octet} << (8 * place)) | 0x01010101u));
    }
  }
  // Every pattern of zero and non-zero groups (where "::" goes, ties, runs of one), the
  // non-zero ones with 1 to 4 hex digits; and with group 5 0xffff (IPv4-mapped where the rest
  // before it is zero).
  const std::array<unsigned, 6> values{0x1, 0xf, 0x10, 0xabc, 0xffff, 0x1000};
  for (unsigned pattern = 0; pattern < 256; ++pattern) {
    for (unsigned fill = 0; fill < 8; ++fill) {
      std::array<unsigned, 8> g{};
      for (unsigned i = 0; i < 8; ++i) {
        if ((pattern >> i) & 1) {
          g[i] = fill < values.size() ? values[(fill + i) % values.size()]
                                      : static_cast<unsigned>(rng() % 0xffff) + 1;
        }
      }
      check(V6(g));
      g[5] = 0xffff;
      check(V6(g));
    }
  }
  for (int i = 0; i < 2000; ++i) {
    check(IpAddr(IpVersion::kV6, (uint128{rng()} << 64) | rng()));
  }
  EXPECT_EQ(compared, 4 * 256 * 2 + 256 * 8 * 2 + 2000);
  EXPECT_EQ(V6({0, 0, 0, 0, 0, 0xffff, 0xc000, 0x0201}).ToString(), "::ffff:192.0.2.1");
  EXPECT_EQ(V6({0, 0, 0, 0, 0, 0, 0, 0}).ToString(), "::");
  EXPECT_EQ(V6({0x2001, 0xdb8, 0, 0, 1, 0, 0, 1}).ToString(), "2001:db8::1:0:0:1");
}

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
