#include "common/name.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
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

TEST(Uuid, RandomIdsAreVersion4AndRoundTrip) {
  Uuid a = Uuid::Random();
  Uuid b = Uuid::Random();
  EXPECT_NE(a, b);
  std::string text = a.ToString();
  EXPECT_EQ(text.size(), 36u);
  EXPECT_EQ(text[14], '4');
  EXPECT_EQ(*Uuid::Parse(text), a);
  EXPECT_FALSE(Uuid::Parse("b1939088-9bff-416a-b203-1f5a3f37b1c"));
  EXPECT_FALSE(Uuid::Parse("b1939088x9bff-416a-b203-1f5a3f37b1ca"));
}

TEST(Uuid, TimeOrderedIdsAreVersion7AndSortByCreationTime) {
  Uuid first = Uuid::TimeOrdered();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  Uuid second = Uuid::TimeOrdered();
  EXPECT_LT(first, second);
  // Their text sorts the same way: the datastore compares the stored text.
  EXPECT_LT(first.ToString(), second.ToString());
  std::string text = second.ToString();
  EXPECT_EQ(text[14], '7');
  EXPECT_TRUE(text[19] == '8' || text[19] == '9' || text[19] == 'a' || text[19] == 'b') << text;
  EXPECT_EQ(*Uuid::Parse(text), second);
  // The first 48 bits are the Unix time in milliseconds.
  auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  int64_t stamped = std::stoll(text.substr(0, 8) + text.substr(9, 4), nullptr, 16);
  EXPECT_LE(stamped, now_ms);
  EXPECT_GT(stamped, now_ms - 10'000);
  EXPECT_NE(Uuid::TimeOrdered(), Uuid::TimeOrdered());  // the random part differs
}

}  // namespace
}  // namespace fp
