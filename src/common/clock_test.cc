#include "common/clock.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "common/testing/manual_clock.h"

namespace fp {
namespace {

using namespace std::chrono_literals;
using testing::ManualClock;

TEST(ManualClock, MovesOnlyWhenToldAndASleepPassesItsTime) {
  ManualClock clock;
  const Timestamp wall = clock.Now();
  const MonoTime mono = clock.Monotonic();
  EXPECT_EQ(clock.Now(), wall);
  clock.Advance(1500ms);
  EXPECT_EQ(clock.Now(), wall + 1'500'000);
  EXPECT_EQ(clock.Monotonic(), mono + 1500ms);
  clock.SleepFor(250ms);  // returns at once, the time passed
  EXPECT_EQ(clock.Monotonic(), mono + 1750ms);
  // A wall clock stepped back: monotonic time stays.
  clock.Advance(-10 * testing::kSecond);
  EXPECT_EQ(clock.Now(), wall + 1'750'000 - 10'000'000);
  EXPECT_EQ(clock.Monotonic(), mono + 1750ms);
  EXPECT_EQ(clock.Left(clock.Deadline(3s)), MonoDuration(3s));
}

TEST(ManualClock, AWaitWithADeadlineEndsWhenTheClockReachesItNotTheRealOne) {
  ManualClock clock;
  Mutex mu;
  std::condition_variable cv;
  MutexLock lock(mu);
  // The condition moves the clock a second each time it is asked: the wait must time out when
  // the clock reaches its deadline, ten seconds on, after the eleventh look (one more at the
  // deadline), in a few milliseconds of real time.
  int looks = 0;
  const bool got = clock.WaitFor(lock, cv, 10s, [&] {
    ++looks;
    clock.Advance(1s);
    return false;
  });
  EXPECT_FALSE(got);
  EXPECT_EQ(looks, 11);
}

TEST(ManualClock, AWaitEndsWhenItsConditionHolds) {
  ManualClock clock;
  Mutex mu;
  std::condition_variable cv;
  bool done = false;  // under mu (a local: the analysis cannot annotate it)
  bool got = false;
  std::thread waiter([&] {
    MutexLock lock(mu);
    got = clock.WaitFor(lock, cv, 10s, [&] { return done; });
  });
  {
    MutexLock lock(mu);
    done = true;
  }
  cv.notify_all();
  waiter.join();
  EXPECT_TRUE(got);
}

TEST(SystemClock, AWaitTimesOutOnTheRealClock) {
  SystemClock clock;
  Mutex mu;
  std::condition_variable cv;
  MutexLock lock(mu);
  const MonoTime began = clock.Monotonic();
  EXPECT_FALSE(clock.WaitFor(lock, cv, 20ms, [] { return false; }));
  EXPECT_GE(clock.Monotonic() - began, MonoDuration(20ms));
  const Timestamp wall = clock.Now();
  EXPECT_GT(wall, Timestamp{1'700'000'000'000'000});  // after November 2023
}

}  // namespace
}  // namespace fp
