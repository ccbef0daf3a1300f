#include "common/uuid.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <thread>

namespace fp {
namespace {

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

TEST(Uuid, JitterIsBelowItsBoundAndSpreadOverIt) {
  EXPECT_EQ(JitterBelow(0), 0u);
  EXPECT_EQ(JitterBelow(1), 0u);
  std::set<uint64_t> seen;
  for (int i = 0; i < 1000; ++i) {
    uint64_t v = JitterBelow(10);
    ASSERT_LT(v, 10u);
    seen.insert(v);
  }
  EXPECT_EQ(seen.size(), 10u);  // 1,000 draws miss none of 10 values
}

TEST(Uuid, TimeOrderedIdsAreVersion7AndSortByCreationTime) {
  Uuid first = Uuid::TimeOrdered();
  // A later millisecond on the real clock, which TimeOrdered reads (until the clock seam
  // reaches it: issue 27).
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
