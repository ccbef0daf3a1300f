#include "http/host_port.h"

#include <gtest/gtest.h>

namespace fp::http {
namespace {

std::string Message(std::string_view text, std::optional<uint16_t> default_port = {}) {
  auto parsed = ParseHostPort(text, default_port);
  if (parsed) return "ok";
  EXPECT_EQ(parsed.error().kind(), ErrorKind::kInvalidRequest);
  return parsed.error().message();
}

TEST(ParseHostPort, Ipv4AndNames) {
  auto a = ParseHostPort("127.0.0.1:12220");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 12220);
  auto b = ParseHostPort("switch.local:0");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->host, "switch.local");
  EXPECT_EQ(b->port, 0);
  // The host is not checked.
  auto c = ParseHostPort(":80");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->host, "");
  EXPECT_EQ(c->port, 80);
}

TEST(ParseHostPort, BracketedIpv6) {
  auto a = ParseHostPort("[::1]:8080");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->host, "::1");
  EXPECT_EQ(a->port, 8080);
  auto b = ParseHostPort("[fd00:1122:3344:101::1]:65535");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->host, "fd00:1122:3344:101::1");
  EXPECT_EQ(b->port, 65535);
  EXPECT_EQ(Message("[::1]"), "expected [IPV6]:PORT");
  EXPECT_EQ(Message("[::1]8080"), "expected [IPV6]:PORT");
  EXPECT_EQ(Message("[::1:8080"), "expected [IPV6]:PORT");
  // Unbracketed, the port is what follows the last ':'.
  auto c = ParseHostPort("::1:8080");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->host, "::1");
  EXPECT_EQ(c->port, 8080);
}

TEST(ParseHostPort, MissingPort) {
  EXPECT_EQ(Message("localhost"), "expected HOST:PORT");
  EXPECT_EQ(Message(""), "expected HOST:PORT");
  EXPECT_EQ(Message("localhost:"), "the port must be a number from 0 to 65535");
  EXPECT_EQ(Message("[::1]:"), "the port must be a number from 0 to 65535");
}

TEST(ParseHostPort, DefaultPortWhenLeftOut) {
  EXPECT_EQ(ParseHostPort("localhost", 80)->port, 80);
  EXPECT_EQ(ParseHostPort("localhost:", 80)->port, 80);
  EXPECT_EQ(ParseHostPort("[::1]", 80)->port, 80);
  EXPECT_EQ(ParseHostPort("[::1]:", 80)->port, 80);
  EXPECT_EQ(ParseHostPort("[::1]", 80)->host, "::1");
  EXPECT_EQ(ParseHostPort("localhost:81", 80)->port, 81);
}

TEST(ParseHostPort, PortOutOfRangeOrNotDigits) {
  for (const char* bad : {"h:65536", "h:99999", "h:100000", "h:-1", "h:+80", "h: 80", "h:8o",
                          "h:0x50", "[::1]:70000"}) {
    EXPECT_EQ(Message(bad), "the port must be a number from 0 to 65535") << bad;
    EXPECT_EQ(Message(bad, 80), "the port must be a number from 0 to 65535") << bad;
  }
  EXPECT_EQ(ParseHostPort("h:00080")->port, 80);
}

TEST(UrlHost, BracketsIpv6Only) {
  EXPECT_EQ(UrlHost("::1"), "[::1]");
  EXPECT_EQ(UrlHost("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(UrlHost("switch.local"), "switch.local");
}

}  // namespace
}  // namespace fp::http
