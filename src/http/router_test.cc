#include "http/router.h"

#include <gtest/gtest.h>

namespace fp::http {
namespace {

using Kind = RouteMiss::Kind;

TEST(Router, MatchesPatternsAndTellsMethodFromPath) {
  Router<int> r;
  r.Add("GET", "/v1/system/ip-pools/{pool}", 1);
  r.Add("PUT", "/v1/system/ip-pools/{pool}/silos/{silo}", 2);
  auto m = r.Find("PUT", "/v1/system/ip-pools/p%2D1/silos/default");
  ASSERT_TRUE(m);
  EXPECT_EQ(*m->target, 2);
  EXPECT_EQ(m->params.at("pool"), "p-1");
  EXPECT_EQ(m->params.at("silo"), "default");
  EXPECT_EQ(r.Find("DELETE", "/v1/system/ip-pools/x").error().kind, Kind::kMethodNotAllowed);
  EXPECT_EQ(r.Find("GET", "/v1/nothing").error().kind, Kind::kNotFound);
}

TEST(Router, LiteralSegmentsMustMatchExactlyAndParamsTakeAnySegment) {
  Router<int> r;
  r.Add("GET", "/instances/{id}", 1);
  r.Add("GET", "/instances/{id}/external-ips", 2);
  EXPECT_EQ(*r.Find("GET", "/instances/abc")->target, 1);
  EXPECT_EQ(*r.Find("GET", "/instances/abc/external-ips")->target, 2);
  // Literals compare as received: an encoded literal is another segment.
  EXPECT_EQ(r.Find("GET", "/instances/abc/external%2Dips").error().kind, Kind::kNotFound);
  EXPECT_EQ(r.Find("GET", "/Instances/abc").error().kind, Kind::kNotFound);
  // Segment count matters; empty segments do not.
  EXPECT_EQ(r.Find("GET", "/instances").error().kind, Kind::kNotFound);
  EXPECT_EQ(r.Find("GET", "/instances/abc/external-ips/x").error().kind, Kind::kNotFound);
  EXPECT_EQ(*r.Find("GET", "//instances//abc/")->target, 1);
}

TEST(Router, FirstRouteAddedWinsAndLiteralCanPrecedeParam) {
  Router<int> r;
  r.Add("GET", "/pools/default", 1);
  r.Add("GET", "/pools/{pool}", 2);
  EXPECT_EQ(*r.Find("GET", "/pools/default")->target, 1);
  auto m = r.Find("GET", "/pools/other");
  ASSERT_TRUE(m);
  EXPECT_EQ(*m->target, 2);
  EXPECT_EQ(m->params.at("pool"), "other");
}

TEST(Router, PercentDecodesParamsButNotPlus) {
  Router<int> r;
  r.Add("GET", "/ips/{ip}", 1);
  auto m = r.Find("GET", "/ips/fd00%3A%3a1+x%20y%2F");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->params.at("ip"), "fd00::1+x y/");
}

TEST(Router, MalformedEncodingInParamIsItsOwnMiss) {
  Router<int> r;
  r.Add("GET", "/ips/{ip}", 1);
  r.Add("POST", "/ips/{ip}", 2);
  for (const char* bad : {"%zz", "a%2", "%", "x%g1"}) {
    auto m = r.Find("GET", std::string("/ips/") + bad);
    ASSERT_FALSE(m) << bad;
    EXPECT_EQ(m.error().kind, Kind::kMalformedSegment) << bad;
    EXPECT_EQ(m.error().segment, bad);
  }
  // A malformed segment matches no pattern, so the method is not judged: not 405.
  EXPECT_EQ(r.Find("DELETE", "/ips/%zz").error().kind, Kind::kMalformedSegment);
  // A literal mismatch before the parameter: the path is simply not routed.
  EXPECT_EQ(r.Find("GET", "/other/%zz").error().kind, Kind::kNotFound);
}

TEST(Router, MethodNotAllowedWinsOverMalformedElsewhere) {
  Router<int> r;
  r.Add("GET", "/a/{x}", 1);
  r.Add("POST", "/a/%zz", 2);
  EXPECT_EQ(r.Find("GET", "/a/%zz").error().kind, Kind::kMethodNotAllowed);
  EXPECT_EQ(*r.Find("POST", "/a/%zz")->target, 2);
}

}  // namespace
}  // namespace fp::http
