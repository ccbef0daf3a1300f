// The allocator trimmer: it hands free memory back only above its threshold, and looks every
// period on its own thread.

#include "cmd/process.h"

#include <gtest/gtest.h>

#include <atomic>

#include "common/testing/manual_clock.h"
#include "common/testing/wait_for.h"

namespace fp::cmd {
namespace {

class AllocatorTrimmerTest : public ::testing::Test {
 protected:
  AllocatorTrimmer::Allocator Fake() {
    return {.free_bytes = [this] { return free_.load(); },
            .trim =
                [this] {
                  ++trimmed_;
                  free_ = 0;
                }};
  }
  testing::ManualClock clock_;
  std::atomic<size_t> free_{0};
  std::atomic<int> trimmed_{0};
};

TEST_F(AllocatorTrimmerTest, TrimsOnlyWhenMoreThanItKeepsIsFree) {
  AllocatorTrimmer trimmer(clock_, std::chrono::hours(1), 8 << 20, Fake());
  free_ = 8 << 20;
  EXPECT_FALSE(trimmer.TrimIfAbove());
  EXPECT_EQ(trimmed_.load(), 0);
  free_ = (8 << 20) + 1;
  EXPECT_TRUE(trimmer.TrimIfAbove());
  EXPECT_EQ(trimmed_.load(), 1);
  EXPECT_EQ(free_.load(), 0u);
  EXPECT_EQ(trimmer.trims(), 1);
}

TEST_F(AllocatorTrimmerTest, LooksEveryPeriodOnItsOwnThread) {
  AllocatorTrimmer trimmer(clock_, std::chrono::seconds(5), 1 << 20, Fake());
  free_ = 64 << 20;  // a burst's peak, freed
  clock_.Advance(std::chrono::seconds(4));
  EXPECT_FALSE(fp::testing::WaitFor([&] { return trimmed_ > 0; }, std::chrono::milliseconds(50)));
  clock_.Advance(std::chrono::seconds(1));
  ASSERT_TRUE(fp::testing::WaitFor([&] { return trimmed_ > 0; }));
  EXPECT_EQ(trimmer.trims(), 1);
}

}  // namespace
}  // namespace fp::cmd
