#include "api/json_input.h"

#include <gtest/gtest.h>

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

TEST(ParseBodyObject, NumbersBeyondDoubleRangeAre400NamingTheField) {
  auto message = [](const std::string& body) { return ParseBodyObject(body).error().message(); };
  EXPECT_EQ(message(R"({"name":"a1","description":"","x":1e400})"),
            "unable to parse JSON body: field \"x\": number out of range (at byte 39)");
  EXPECT_EQ(ParseBodyObject(R"({"x":-1e400})").error().kind(), ErrorKind::kInvalidRequest);
  EXPECT_EQ(message(R"({"quotas": {"cpus": 1, "memory": 1e999}})"),
            "unable to parse JSON body: field \"quotas.memory\": number out of range (at byte 38)");
  EXPECT_EQ(message(R"({"a": [1, {"b": [2, 3e500]}]})"),
            "unable to parse JSON body: field \"a[1].b[1]\": number out of range (at byte 25)");
  EXPECT_EQ(message("1e400"), "unable to parse JSON body: number out of range (at byte 5)");
  // Integers beyond 64 bits and tiny numbers are finite doubles: parsed, left to the fields.
  auto big = ParseBodyObject(R"({"n": 99999999999999999999, "t": 1e-400})");
  ASSERT_TRUE(big) << big.error().message();
  EXPECT_TRUE((*big)["n"].is_number_float());
}

TEST(ParseBodyObject, DuplicateKeysAre400NamingTheFieldAtAnyDepth) {
  auto message = [](const std::string& body) { return ParseBodyObject(body).error().message(); };
  EXPECT_EQ(message(R"({"name":"a","description":"","name":"b"})"),
            "unable to parse JSON body: field \"name\": duplicate field `name`");
  EXPECT_EQ(message(R"({"address_allocator": {"type": "auto", "type": "auto"}})"),
            "unable to parse JSON body: field \"address_allocator.type\": duplicate field `type`");
  EXPECT_EQ(message(R"({"list": [{}, {"x": {"y": 1, "y": 1}}]})"),
            "unable to parse JSON body: field \"list[1].x.y\": duplicate field `y`");
  // The same key in different objects is not a duplicate.
  EXPECT_TRUE(ParseBodyObject(R"({"a": {"k": 1}, "b": {"k": 1}, "k": [{"k": 1}, {"k": 2}]})"));
}

TEST(ParseBodyObject, KeepsTheDocumentAndRefusesDeepNesting) {
  auto j = ParseBodyObject(R"({"s": "x", "n": -3, "u": 18446744073709551615, "f": 1.5,
                                "b": true, "z": null, "a": [1, [2, {"c": []}]], "o": {}})");
  ASSERT_TRUE(j) << j.error().message();
  EXPECT_EQ(*j, Json::parse(R"({"s": "x", "n": -3, "u": 18446744073709551615, "f": 1.5,
                                "b": true, "z": null, "a": [1, [2, {"c": []}]], "o": {}})"));
  // The object and 127 arrays inside it make 128 levels; one more is refused.
  EXPECT_TRUE(ParseBodyObject("{\"a\":" + std::string(127, '[') + std::string(127, ']') + "}"));
  EXPECT_NE(ParseBodyObject("{\"a\":" + std::string(128, '[') + std::string(128, ']') + "}")
                .error()
                .message()
                .find("deeper than 128 levels"),
            std::string::npos);
  EXPECT_NE(ParseBodyObject(R"({"a": 1} x)").error().message().find("not valid JSON (at byte"),
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

}  // namespace
}  // namespace fp::api
