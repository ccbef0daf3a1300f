#include "api/json_input.h"

#include <gtest/gtest.h>

#include "api/router.h"

namespace fp::api {
namespace {

TEST(ParseBodyObject, RejectsNonObjectsAndMalformedJson) {
  EXPECT_TRUE(ParseBodyObject("{}"));
  EXPECT_TRUE(ParseBodyObject("", /*allow_empty=*/true));
  EXPECT_FALSE(ParseBodyObject(""));
  auto bad = ParseBodyObject("{\"name\": ");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().kind(), ErrorKind::kInvalidRequest);
  EXPECT_NE(bad.error().message().find("not valid JSON"), std::string::npos);
  EXPECT_NE(ParseBodyObject("[1]").error().message().find("expected a JSON object"),
            std::string::npos);
}

TEST(Fields, ErrorsNameTheFieldAndItsPath) {
  Json body = Json::parse(R"({"name": 5, "nested": {"ip": "1.2.3"}, "flag": "yes"})");
  Fields f(body, "");
  EXPECT_EQ(f.String("name").error().message(),
            "unable to parse JSON body: field \"name\": expected a string, got a number");
  EXPECT_EQ(f.String("missing").error().message(),
            "unable to parse JSON body: missing field \"missing\"");
  EXPECT_NE(f.Bool("flag").error().message().find("\"flag\""), std::string::npos);
  auto nested = f.Object("nested");
  ASSERT_TRUE(nested);
  EXPECT_NE(nested->Ip("ip").error().message().find("field \"nested.ip\""), std::string::npos);
}

TEST(Fields, NullMeansAbsentForOptionalFields) {
  Json body = Json::parse(R"({"name": null, "description": "d"})");
  Fields f(body, "");
  EXPECT_FALSE(f.OptName("name").value().has_value());
  EXPECT_EQ(f.OptString("description").value().value(), "d");
  Json bad = Json::parse(R"({"name": "Bad"})");
  EXPECT_NE(Fields(bad, "").OptName("name").error().message().find("lowercase"), std::string::npos);
}

TEST(Query, DecodesAndValidatesParameters) {
  auto q = Query::Parse("project=my%2Dproj&ip_version=v6&empty=&x=a+b");
  ASSERT_TRUE(q);
  EXPECT_EQ(q->Get("project").value(), "my-proj");
  EXPECT_EQ(q->Get("x").value(), "a b");
  EXPECT_EQ(q->OptIpVersion("ip_version").value(), IpVersion::kV6);
  EXPECT_FALSE(q->Get("absent"));
  auto bad = Query::Parse("project=Not_A_Name");
  ASSERT_TRUE(bad);
  EXPECT_NE(bad->OptNameOrId("project").error().message().find("\"project\""), std::string::npos);
  EXPECT_NE(q->RequiredNameOrId("pool").error().message().find("missing parameter \"pool\""),
            std::string::npos);
  EXPECT_FALSE(Query::Parse("a=%zz"));
}

TEST(Router, MatchesPatternsAndTellsMethodFromPath) {
  Router<int> r;
  r.Add("GET", "/v1/system/ip-pools/{pool}", 1);
  r.Add("PUT", "/v1/system/ip-pools/{pool}/silos/{silo}", 2);
  auto m = r.Find("PUT", "/v1/system/ip-pools/p%2D1/silos/default");
  ASSERT_TRUE(m);
  EXPECT_EQ(*m->target, 2);
  EXPECT_EQ(m->params.at("pool"), "p-1");
  EXPECT_EQ(m->params.at("silo"), "default");
  EXPECT_EQ(r.Find("DELETE", "/v1/system/ip-pools/x").error().kind(), ErrorKind::kInvalidRequest);
  EXPECT_EQ(r.Find("GET", "/v1/nothing").error().kind(), ErrorKind::kNotFound);
}

}  // namespace
}  // namespace fp::api
