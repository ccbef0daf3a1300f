#include "common/sha256.h"

#include <gtest/gtest.h>

namespace fp {
namespace {

// FIPS 180-2's test vectors: a stored token hash or request fingerprint that changed would
// lock every token out and make every keyed retry a 422.
TEST(Sha256Hex, MatchesTheStandardsTestVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

}  // namespace
}  // namespace fp
