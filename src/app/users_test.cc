// The login throttle's arithmetic, on explicit timestamps (users.h).

#include "app/users.h"

#include <gtest/gtest.h>

#include "app/passwords.h"

namespace fp::app {
namespace {

constexpr Timestamp kSecond = 1'000'000;

TEST(LoginThrottle, AUserFromOneSourceWaitsLongerAfterEachFailureBeyondTheFreeOnes) {
  LoginThrottle throttle;
  Timestamp now = 1000 * kSecond;
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(throttle.WaitBefore("10.0.0.1", "default/bob", now), std::nullopt) << i;
    throttle.Failed("10.0.0.1", "default/bob", now);
  }
  EXPECT_EQ(throttle.WaitBefore("10.0.0.1", "default/bob", now), 1);
  EXPECT_EQ(throttle.WaitBefore("10.0.0.1", "default/bob", now + kSecond), std::nullopt);
  now += kSecond;
  throttle.Failed("10.0.0.1", "default/bob", now);
  EXPECT_EQ(throttle.WaitBefore("10.0.0.1", "default/bob", now), 2);
  throttle.Failed("10.0.0.1", "default/bob", now);
  EXPECT_EQ(throttle.WaitBefore("10.0.0.1", "default/bob", now), 4);
  // Not the same user elsewhere, nor another user here.
  EXPECT_EQ(throttle.WaitBefore("10.0.0.2", "default/bob", now), std::nullopt);
  EXPECT_EQ(throttle.WaitBefore("10.0.0.1", "default/carol", now), std::nullopt);
  // A success (after the wait) clears the user's count here.
  throttle.Succeeded("10.0.0.1", "default/bob");
  EXPECT_EQ(throttle.WaitBefore("10.0.0.1", "default/bob", now), std::nullopt);
}

TEST(LoginThrottle, OneSourceTryingManyUsersWaitsAfterTwentyFailures) {
  LoginThrottle throttle;
  const Timestamp now = 1000 * kSecond;
  for (int i = 0; i < 20; ++i) throttle.Failed("10.0.0.9", "default/user" + std::to_string(i), now);
  EXPECT_EQ(throttle.WaitBefore("10.0.0.9", "default/someone-new", now), 1);
  EXPECT_EQ(throttle.WaitBefore("10.0.0.8", "default/someone-new", now), std::nullopt);
  // The wait is capped at 15 minutes, and a quiet window forgives.
  for (int i = 0; i < 40; ++i) throttle.Failed("10.0.0.9", "default/x", now);
  EXPECT_EQ(throttle.WaitBefore("10.0.0.9", "default/y", now), 15 * 60);
  EXPECT_EQ(throttle.WaitBefore("10.0.0.9", "default/y", now + 15 * 60 * kSecond), std::nullopt);
  throttle.Failed("10.0.0.9", "default/y", now + 16 * 60 * kSecond);
  EXPECT_EQ(throttle.WaitBefore("10.0.0.9", "default/y", now + 16 * 60 * kSecond), std::nullopt);
}

TEST(Passwords, AreStoredAsArgon2idAndOnlyTheRightOneMatches) {
  auto hash = HashPassword("correct horse battery staple");
  ASSERT_TRUE(hash) << hash.error().message();
  EXPECT_EQ(hash->rfind("$argon2id$v=19$m=19456,t=2,p=1$", 0), 0u) << *hash;
  EXPECT_EQ(hash->find("correct horse"), std::string::npos);
  EXPECT_TRUE(PasswordMatches("correct horse battery staple", *hash));
  EXPECT_FALSE(PasswordMatches("correct horse battery stapl", *hash));
  EXPECT_FALSE(PasswordMatches("correct horse battery staple", "$argon2i$v=19$m=8,t=1,p=1$x$y"));
  // Two hashes of one password differ (each has its own salt).
  EXPECT_NE(*HashPassword("correct horse battery staple"), *hash);
  EXPECT_FALSE(CheckNewPassword("short", "value"));
  EXPECT_FALSE(CheckNewPassword(std::string(513, 'x'), "value"));
  EXPECT_TRUE(CheckNewPassword("eight ch", "value"));
}

}  // namespace
}  // namespace fp::app
