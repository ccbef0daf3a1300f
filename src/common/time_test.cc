#include "common/time.h"

#include <gtest/gtest.h>

namespace fp {
namespace {

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
