#include "common/time.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <ctime>

namespace fp {
namespace {

// The text of `t` by the C library's calendar (gmtime_r), as FormatRfc3339 wrote it before.
std::string ByGmtime(Timestamp t) {
  time_t secs = static_cast<time_t>(t / 1000000);
  int64_t micros = t % 1000000;
  if (micros < 0) {
    micros += 1000000;
    --secs;
  }
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, micros);
}

TEST(Rfc3339Test, WritesTheDateTheCLibrarysCalendarGives) {
  constexpr int64_t kDay = 86400;
  int compared = 0;
  auto check = [&](Timestamp t) {
    EXPECT_EQ(FormatRfc3339(t), ByGmtime(t)) << t;
    ++compared;
  };
  // Every day from 1968 to 2104 (leap days, 2000 and 2100), at its first and last microsecond.
  for (int64_t day = -731; day < 49'000; ++day) {
    check(day * kDay * 1'000'000);
    check(((day + 1) * kDay) * 1'000'000 - 1);
  }
  // Years 0001 to 9999 in strides of a prime number of seconds, and years beyond four digits.
  for (int64_t s = -62'135'596'800; s < 253'402'300'800; s += 6'311'009) {
    check(s * 1'000'000 + s % 1'000'000);
  }
  for (Timestamp t : {int64_t{-62'167'219'200'000'000} - 1, int64_t{253'402'300'800'000'000},
                      int64_t{-1}, int64_t{0}, int64_t{1'795'000'000'123'456}}) {
    check(t);
  }
  EXPECT_GT(compared, 140'000);
  EXPECT_EQ(FormatRfc3339(951'782'400'000'000), "2000-02-29T00:00:00.000000Z");
}

TEST(Rfc3339Test, ParsesWhatFormatWritesAndOffsets) {
  Timestamp t = 1795000000123456;
  EXPECT_EQ(ParseRfc3339(FormatRfc3339(t)), t);
  EXPECT_EQ(ParseRfc3339("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(ParseRfc3339("1970-01-01T01:00:00+01:00"), 0);
  EXPECT_EQ(ParseRfc3339("1969-12-31T23:30:00-00:30"), 0);
  EXPECT_EQ(ParseRfc3339("1970-01-01T00:00:01.5Z"), 1500000);
  EXPECT_EQ(ParseRfc3339("1970-01-01T00:00:00.123456789Z"), 123456);
}

TEST(Rfc3339Test, RefusesWhatIsNotADateTime) {
  for (const char* bad : {"", "2026-11-29", "2026-11-29T15:24:39", "2026-13-01T00:00:00Z",
                          "2026-02-30T00:00:00Z", "2026-11-29T24:00:00Z", "2026-11-29T15:24:39.Z",
                          "2026-11-29T15:24:39Zjunk", "2026-11-29T15:24:39+0100", "yesterday"}) {
    EXPECT_FALSE(ParseRfc3339(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace fp
