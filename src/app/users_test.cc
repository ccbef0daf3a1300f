// The login throttle's arithmetic, on explicit timestamps (users.h).

#include "app/users.h"

#include <gtest/gtest.h>

#include "app/passwords.h"
#include "common/testing/manual_clock.h"

namespace fp::app {
namespace {

using fp::testing::kSecond;

TEST(LoginThrottle, AUserFromOneSourceWaitsLongerAfterEachFailureBeyondTheFreeOnes) {
  LoginThrottle throttle;
  Timestamp now = 1000 * kSecond;
  // Each admitted attempt counts as failed (none succeeds here).
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(throttle.Admit("10.0.0.1", "default/bob", now), std::nullopt) << i;
  }
  EXPECT_EQ(throttle.Admit("10.0.0.1", "default/bob", now), 1);
  now += kSecond;
  EXPECT_EQ(throttle.Admit("10.0.0.1", "default/bob", now), std::nullopt);
  EXPECT_EQ(throttle.Admit("10.0.0.1", "default/bob", now), 2);
  now += 2 * kSecond;
  EXPECT_EQ(throttle.Admit("10.0.0.1", "default/bob", now), std::nullopt);
  EXPECT_EQ(throttle.Admit("10.0.0.1", "default/bob", now), 4);
  // Not the same user elsewhere, nor another user here.
  EXPECT_EQ(throttle.Admit("10.0.0.2", "default/bob", now), std::nullopt);
  EXPECT_EQ(throttle.Admit("10.0.0.1", "default/carol", now), std::nullopt);
  // A success clears the user's count here, and does not count against the source.
  throttle.Succeeded("10.0.0.1", "default/carol");
  now += 4 * kSecond;
  EXPECT_EQ(throttle.Admit("10.0.0.1", "default/bob", now), std::nullopt);
  throttle.Succeeded("10.0.0.1", "default/bob");
  EXPECT_EQ(throttle.Admit("10.0.0.1", "default/bob", now), std::nullopt);
}

TEST(LoginThrottle, ABurstOfParallelGuessesGetsNoMoreTriesThanASequence) {
  // Admit counts the attempt at once: the sixth guess in the same instant is refused, before
  // any of the first five has been checked.
  LoginThrottle throttle;
  const Timestamp now = 1000 * kSecond;
  int admitted = 0;
  for (int i = 0; i < 50; ++i) admitted += throttle.Admit("10.0.0.1", "default/bob", now) ? 0 : 1;
  EXPECT_EQ(admitted, 5);
}

TEST(LoginThrottle, OneSourceTryingManyUsersWaitsAfterTwentyFailures) {
  LoginThrottle throttle;
  const Timestamp now = 1000 * kSecond;
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(throttle.Admit("10.0.0.9", "default/user" + std::to_string(i), now), std::nullopt);
  }
  EXPECT_EQ(throttle.Admit("10.0.0.9", "default/someone-new", now), 1);
  EXPECT_EQ(throttle.Admit("10.0.0.8", "default/someone-new", now), std::nullopt);
  // The wait doubles with each further failure, up to 15 minutes.
  Timestamp t = now;
  for (int f = 20; f < 32; ++f) {
    const std::string user = "default/z" + std::to_string(f);
    auto wait = throttle.Admit("10.0.0.9", user, t);
    ASSERT_TRUE(wait) << f;
    EXPECT_EQ(*wait, std::min<int64_t>(int64_t{1} << (f - 20), 15 * 60)) << f;
    t += *wait * kSecond;
    ASSERT_EQ(throttle.Admit("10.0.0.9", user, t), std::nullopt) << f;
  }
  // A quiet window forgives: the count starts again.
  t += 16 * 60 * kSecond;
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(throttle.Admit("10.0.0.9", "default/w" + std::to_string(i), t), std::nullopt) << i;
  }
}

TEST(Passwords, AreStoredAsArgon2idAndOnlyTheRightOneMatches) {
  auto hash = HashPassword("correct horse battery staple", MachineRandom());
  ASSERT_TRUE(hash) << hash.error().message();
  EXPECT_EQ(hash->rfind("$argon2id$v=19$m=19456,t=2,p=1$", 0), 0u) << *hash;
  EXPECT_EQ(hash->find("correct horse"), std::string::npos);
  EXPECT_TRUE(PasswordMatches("correct horse battery staple", *hash));
  EXPECT_FALSE(PasswordMatches("correct horse battery stapl", *hash));
  EXPECT_FALSE(PasswordMatches("correct horse battery staple", "$argon2i$v=19$m=8,t=1,p=1$x$y"));
  // Two hashes of one password differ (each has its own salt).
  EXPECT_NE(*HashPassword("correct horse battery staple", MachineRandom()), *hash);
  EXPECT_FALSE(CheckNewPassword("short", "value"));
  EXPECT_FALSE(CheckNewPassword(std::string(513, 'x'), "value"));
  EXPECT_TRUE(CheckNewPassword("eight ch", "value"));
}

}  // namespace
}  // namespace fp::app
