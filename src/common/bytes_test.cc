#include "common/bytes.h"

#include <gtest/gtest.h>

namespace fp {
namespace {

TEST(ShowByteCount, TakesTheLargestBinaryUnitThatDividesIt) {
  EXPECT_EQ(ShowByteCount(uint64_t{1} << 30), "1 GiB");
  EXPECT_EQ(ShowByteCount(uint64_t{1536} << 30), "1536 GiB");
  EXPECT_EQ(ShowByteCount(uint64_t{2} << 40), "2 TiB");
  EXPECT_EQ(ShowByteCount(uint64_t{512} << 20), "512 MiB");
  EXPECT_EQ(ShowByteCount(1536), "1536 B");  // not a whole number of KiB
  EXPECT_EQ(ShowByteCount(3072), "3 KiB");
  EXPECT_EQ(ShowByteCount(1000), "1000 B");
  EXPECT_EQ(ShowByteCount(0), "0 B");
}

}  // namespace
}  // namespace fp
