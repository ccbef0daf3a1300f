#include "common/name.h"

#include <gtest/gtest.h>

#include <vector>

namespace fp {
namespace {

TEST(Name, AcceptsTheSchemaPattern) {
  for (const std::string& ok :
       std::vector<std::string>{"a", "web", "default-v4", "aB9", std::string(63, 'a')}) {
    EXPECT_TRUE(Name::Parse(ok)) << ok;
  }
}

TEST(Name, RejectsWithAMessageSayingWhy) {
  EXPECT_NE(Name::Parse("").error().message().find("at least one"), std::string::npos);
  EXPECT_NE(Name::Parse(std::string(64, 'a')).error().message().find("63"), std::string::npos);
  EXPECT_NE(Name::Parse("Web").error().message().find("lowercase"), std::string::npos);
  EXPECT_NE(Name::Parse("1web").error().message().find("lowercase"), std::string::npos);
  EXPECT_NE(Name::Parse("web-").error().message().find("hyphen"), std::string::npos);
  EXPECT_NE(Name::Parse("we_b").error().message().find("invalid character"), std::string::npos);
  EXPECT_NE(Name::Parse("a0000000-0000-0000-0000-000000000000").error().message().find("UUID"),
            std::string::npos);
}

TEST(NameOrId, UuidShapedTextIsAnId) {
  auto id = NameOrId::Parse("B1939088-9BFF-416A-B203-1F5A3F37B1CA");
  ASSERT_TRUE(id);
  EXPECT_TRUE(id->is_id());
  EXPECT_EQ(id->ToString(), "b1939088-9bff-416a-b203-1f5a3f37b1ca");
  auto name = NameOrId::Parse("web");
  ASSERT_TRUE(name);
  EXPECT_FALSE(name->is_id());
  EXPECT_FALSE(NameOrId::Parse("Not A Name"));
}

}  // namespace
}  // namespace fp
