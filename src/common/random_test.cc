#include "common/random.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace fp {
namespace {

std::vector<std::string> Draws(Random& random) {
  std::vector<std::string> out;
  out.push_back(random.NewUuid().ToString());
  out.push_back(random.NewTimeOrderedUuid(1'800'000'000'000'000).ToString());
  out.push_back(std::to_string(random.Below(1000)));
  uint8_t bytes[5];
  random.Fill(bytes, sizeof bytes);
  for (uint8_t b : bytes) out.push_back(std::to_string(b));
  return out;
}

TEST(SeededRandom, TheSameSeedDrawsTheSameValuesAndAnotherSeedOthers) {
  SeededRandom a(42);
  SeededRandom b(42);
  SeededRandom c(43);
  const auto first = Draws(a);
  EXPECT_EQ(first, Draws(b));
  EXPECT_NE(first, Draws(c));
  EXPECT_NE(first, Draws(a));  // the sequence goes on
}

// A fork's draws leave the parent's sequence where it was: one engine's commit markers must not
// change the ids the same seed gives on another.
TEST(SeededRandom, AForkDrawsWithoutMovingItsParent) {
  SeededRandom a(9);
  SeededRandom b(9);
  auto fork_a = a.Fork();
  auto fork_b = b.Fork();
  for (int i = 0; i < 5; ++i) (void)fork_a->Next();  // only a's fork draws
  EXPECT_EQ(a.NewUuid(), b.NewUuid());
  EXPECT_EQ(fork_a->Next(), [&] {
    for (int i = 0; i < 5; ++i) (void)fork_b->Next();
    return fork_b->Next();
  }());
  EXPECT_NE(SystemRandom().Fork()->NewUuid(), SystemRandom().Fork()->NewUuid());
}

TEST(Random, IdsCarryTheirVersionAndTime) {
  SeededRandom seeded(7);
  SystemRandom system;
  for (Random* random : {static_cast<Random*>(&seeded), static_cast<Random*>(&system)}) {
    std::string v4 = random->NewUuid().ToString();
    EXPECT_EQ(v4[14], '4') << v4;
    EXPECT_NE(std::string("89ab").find(v4[19]), std::string::npos) << v4;
    // 1,800,000,000,000,000 µs is 1,800,000,000,000 ms = 0x01a3185c5000.
    std::string v7 = random->NewTimeOrderedUuid(1'800'000'000'000'000).ToString();
    EXPECT_EQ(v7.substr(0, 13), "01a3185c-5000") << v7;
    EXPECT_EQ(v7[14], '7') << v7;
    EXPECT_NE(random->NewUuid(), random->NewUuid());
  }
}

TEST(Random, BelowStaysUnderItsBoundAndCoversIt) {
  SeededRandom random(1);
  EXPECT_EQ(random.Below(0), 0u);
  EXPECT_EQ(random.Below(1), 0u);
  std::set<uint64_t> seen;
  for (int i = 0; i < 1000; ++i) {
    uint64_t v = random.Below(10);
    ASSERT_LT(v, 10u);
    seen.insert(v);
  }
  EXPECT_EQ(seen.size(), 10u);
}

}  // namespace
}  // namespace fp
