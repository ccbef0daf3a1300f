// The allocator trimmer: it hands free memory back only above its threshold, and looks every
// period on its own thread. The stop-signal watch: a second signal ends the process.

#include "cmd/process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>

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

// The allocator still counts as free what a trim handed back inside its chunks, and fragments
// it could not: the next trim waits until that much and `keep` more is free, rather than
// walking every arena each period for nothing.
TEST_F(AllocatorTrimmerTest, AfterATrimOnlyWhatGrewBeyondWhatItLeftCounts) {
  AllocatorTrimmer::Allocator sticky{.free_bytes = [this] { return free_.load(); },
                                     .trim = [this] { ++trimmed_; }};  // frees nothing
  AllocatorTrimmer trimmer(clock_, std::chrono::hours(1), 8 << 20, sticky);
  free_ = 20 << 20;
  EXPECT_TRUE(trimmer.TrimIfAbove());
  EXPECT_FALSE(trimmer.TrimIfAbove());  // still 20 MiB counted free: nothing new
  free_ = (28 << 20) + 1;
  EXPECT_TRUE(trimmer.TrimIfAbove());
  EXPECT_EQ(trimmed_.load(), 2);
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

// A first signal's work that blocks (a cancel request sent to a database host that is gone
// waits for that host) does not keep a second signal from ending the process at once. In a
// process of its own (a death test): the signals are the process's.
TEST(StopSignalWatchDeathTest, ASecondSignalEndsTheProcessWhileTheFirstsWorkBlocks) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        BlockStopSignals();
        std::atomic<bool> blocked{false};
        StopSignalWatch watch([&blocked] {
          blocked = true;
          for (;;) ::pause();  // the stop signals are blocked here: it never returns
        });
        ::kill(::getpid(), SIGINT);
        fp::testing::WaitFor([&] { return blocked.load(); }, std::chrono::seconds(10));
        ::kill(::getpid(), SIGINT);
        ::sleep(10);
        std::_Exit(0);  // not reached when the second signal ends the process
      },
      ::testing::KilledBySignal(SIGINT), "a second SIGINT: stopping at once");
}

// --listen takes an address to bind: a name (which the server would only fail to bind, naming
// no flag) is refused with the flag, as is a bad port, each named once.
TEST(ParseListenTest, AcceptsAddressesAndRefusesNamesNamingTheFlagOnce) {
  auto v4 = ParseListen("127.0.0.1:12220");
  ASSERT_TRUE(v4) << v4.error().message();
  EXPECT_EQ(v4->host, "127.0.0.1");
  EXPECT_EQ(v4->port, 12220);
  auto v6 = ParseListen("[::1]:0");
  ASSERT_TRUE(v6) << v6.error().message();
  EXPECT_EQ(v6->host, "::1");
  auto name = ParseListen("localhost:8080");
  ASSERT_FALSE(name);
  EXPECT_EQ(name.error().message(),
            "--listen \"localhost:8080\": the host must be an IPv4 or IPv6 address, e.g. "
            "127.0.0.1:12220 or [::1]:12220");
  auto bad = ParseListen("999.1.1.1:80");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message(),
            "--listen \"999.1.1.1:80\": the host must be an IPv4 or IPv6 address, e.g. "
            "127.0.0.1:12220 or [::1]:12220");
  auto port = ParseListen("127.0.0.1:99999");
  ASSERT_FALSE(port);
  EXPECT_EQ(port.error().message().rfind("--listen \"127.0.0.1:99999\": ", 0), 0u)
      << port.error().message();
  EXPECT_EQ(port.error().message().find("--listen", 1), std::string::npos)
      << port.error().message();
}

}  // namespace
}  // namespace fp::cmd
