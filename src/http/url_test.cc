#include "http/url.h"

#include <gtest/gtest.h>

namespace fp::http {
namespace {

TEST(SplitTarget, SplitsAtFirstQuestionMark) {
  auto t = SplitTarget("/v1/x?a=b?c");
  EXPECT_EQ(t.path, "/v1/x");
  EXPECT_EQ(t.query, "a=b?c");
  t = SplitTarget("/v1/x");
  EXPECT_EQ(t.path, "/v1/x");
  EXPECT_EQ(t.query, "");
  t = SplitTarget("/v1/x?");
  EXPECT_EQ(t.path, "/v1/x");
  EXPECT_EQ(t.query, "");
}

TEST(PathSegments, DropsEmptySegments) {
  EXPECT_EQ(PathSegments("/v1//ip-pools/x/"),
            (std::vector<std::string_view>{"v1", "ip-pools", "x"}));
  EXPECT_TRUE(PathSegments("/").empty());
  EXPECT_TRUE(PathSegments("").empty());
  EXPECT_EQ(PathSegments("a%2Fb"), (std::vector<std::string_view>{"a%2Fb"}));
}

TEST(PercentDecode, DecodesEscapesAndPlusAsAsked) {
  EXPECT_EQ(*PercentDecode("a%2Db%2fc+d", Plus::kLiteral), "a-b/c+d");
  EXPECT_EQ(*PercentDecode("a%2Db%2fc+d", Plus::kSpace), "a-b/c d");
  EXPECT_EQ(*PercentDecode("", Plus::kSpace), "");
  EXPECT_EQ(*PercentDecode("%00", Plus::kSpace), std::string(1, '\0'));
  // Characters outside RFC 3986's classes are taken as they are.
  EXPECT_EQ(*PercentDecode("\"{}|^", Plus::kLiteral), "\"{}|^");
  EXPECT_EQ(*PercentDecode("%e2%82%AC", Plus::kLiteral), "\xe2\x82\xac");
}

TEST(PercentDecode, RejectsMalformedEscapes) {
  for (const char* bad : {"%", "%4", "a%", "%zz", "%4g", "%%41", "ab%4", "%41%"}) {
    auto decoded = PercentDecode(bad, Plus::kSpace);
    ASSERT_FALSE(decoded) << bad;
    EXPECT_EQ(decoded.error().kind(), ErrorKind::kInvalidRequest);
    EXPECT_EQ(decoded.error().message(), "invalid percent-encoding");
  }
}

TEST(ParseQuery, DecodesNamesAndValues) {
  auto q = ParseQuery("project=my%2Dproj&ip_version=v6&empty=&flag&x=a+b&&%6Bey=v%3D1");
  ASSERT_TRUE(q);
  EXPECT_EQ(*q, (QueryParams{{"project", "my-proj"},
                             {"ip_version", "v6"},
                             {"empty", ""},
                             {"flag", ""},
                             {"x", "a b"},
                             {"key", "v=1"}}));
}

TEST(ParseQuery, LastValueOfARepeatedNameWins) {
  auto q = ParseQuery("limit=1&limit=2");
  ASSERT_TRUE(q);
  EXPECT_EQ(q->at("limit"), "2");
}

TEST(ParseQuery, EmptyQueryHasNoParams) {
  EXPECT_TRUE(ParseQuery("")->empty());
  EXPECT_TRUE(ParseQuery("&&")->empty());
}

TEST(ParseQuery, MalformedEncodingInNameOrValueFails) {
  for (const char* bad : {"a=%zz", "%zz=1", "a=1&b=%4", "a=%"}) {
    auto q = ParseQuery(bad);
    ASSERT_FALSE(q) << bad;
    EXPECT_EQ(q.error().kind(), ErrorKind::kInvalidRequest);
    EXPECT_EQ(q.error().message(), "unable to parse query string: invalid percent-encoding");
  }
}

}  // namespace
}  // namespace fp::http
