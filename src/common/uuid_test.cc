#include "common/uuid.h"

#include <gtest/gtest.h>

#include <array>
#include <cctype>
#include <cstdint>
#include <set>
#include <string>

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

TEST(Uuid, ParsesEveryDigitInEveryPlaceAndRefusesAnyOtherCharacter) {
  const std::string base = "00000000-0000-0000-0000-000000000000";
  const std::string digits = "0123456789abcdefABCDEF";
  for (size_t at = 0; at < base.size(); ++at) {
    const bool dash = at == 8 || at == 13 || at == 18 || at == 23;
    for (int c = 0; c < 256; ++c) {
      std::string text = base;
      text[at] = static_cast<char>(c);
      const bool valid = dash ? c == '-' : digits.find(static_cast<char>(c)) != std::string::npos;
      auto parsed = Uuid::Parse(text);
      ASSERT_EQ(parsed.has_value(), valid) << "character " << c << " at " << at;
      if (valid && !dash) {
        std::string lower = text;
        lower[at] = static_cast<char>(std::tolower(c));
        EXPECT_EQ(parsed->ToString(), lower) << "character " << c << " at " << at;
      }
    }
  }
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
  std::array<uint8_t, 16> ones;
  ones.fill(0xff);  // the random bits of the earlier id all set: time alone must order them
  Uuid first = Uuid::FromBytesV7(1'700'000'000'000, ones);
  Uuid second = Uuid::FromBytesV7(1'700'000'000'001, std::array<uint8_t, 16>{});
  EXPECT_LT(first, second);
  // Their text sorts the same way: the datastore compares the stored text.
  EXPECT_LT(first.ToString(), second.ToString());
  std::string text = second.ToString();
  EXPECT_EQ(text[14], '7');
  EXPECT_TRUE(text[19] == '8' || text[19] == '9' || text[19] == 'a' || text[19] == 'b') << text;
  EXPECT_EQ(*Uuid::Parse(text), second);
  // The first 48 bits are the Unix time in milliseconds.
  EXPECT_EQ(std::stoll(text.substr(0, 8) + text.substr(9, 4), nullptr, 16), 1'700'000'000'001);
  // The machine's: the same millisecond's ids differ in their random part, and carry the
  // present time.
  Uuid now = Uuid::TimeOrdered();
  EXPECT_NE(now, Uuid::TimeOrdered());
  EXPECT_GT(now, second);
  EXPECT_EQ(now.ToString()[14], '7');
}

}  // namespace
}  // namespace fp
