#include "common/uuid.h"

#include <sys/random.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace fp {

void RandomBytes(uint8_t* out, size_t n) {
  size_t done = 0;
  while (done < n) {
    ssize_t got = getrandom(out + done, n - done, 0);
    if (got < 0) {
      std::perror("getrandom");
      std::abort();
    }
    done += static_cast<size_t>(got);
  }
}

uint64_t JitterBelow(uint64_t bound) {
  static std::atomic<uint64_t> state = [] {
    uint64_t seed = 0;
    RandomBytes(reinterpret_cast<uint8_t*>(&seed), sizeof seed);
    return seed;
  }();
  if (bound == 0) return 0;
  // splitmix64 over a shared counter.
  uint64_t z = state.fetch_add(0x9e3779b97f4a7c15ull, std::memory_order_relaxed);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (z ^ (z >> 31)) % bound;
}

Uuid Uuid::FromBytesV4(std::array<uint8_t, 16> bytes) {
  Uuid u;
  u.bytes_ = bytes;
  u.bytes_[6] = static_cast<uint8_t>((u.bytes_[6] & 0x0f) | 0x40);
  u.bytes_[8] = static_cast<uint8_t>((u.bytes_[8] & 0x3f) | 0x80);
  return u;
}

Uuid Uuid::FromBytesV7(uint64_t unix_ms, std::array<uint8_t, 16> bytes) {
  Uuid u;
  u.bytes_ = bytes;
  for (size_t i = 0; i < 6; ++i) u.bytes_[i] = static_cast<uint8_t>(unix_ms >> (8 * (5 - i)));
  u.bytes_[6] = static_cast<uint8_t>((u.bytes_[6] & 0x0f) | 0x70);
  u.bytes_[8] = static_cast<uint8_t>((u.bytes_[8] & 0x3f) | 0x80);
  return u;
}

Uuid Uuid::Random() {
  std::array<uint8_t, 16> b;
  RandomBytes(b.data(), b.size());
  return FromBytesV4(b);
}

Uuid Uuid::TimeOrdered() {
  using namespace std::chrono;
  const auto ms = static_cast<uint64_t>(
      duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count());
  std::array<uint8_t, 16> b;
  RandomBytes(b.data() + 6, b.size() - 6);
  return FromBytesV7(ms, b);
}

namespace {
// Each byte's hex digit value, or -1: a table read instead of three comparisons per digit
// (ids are parsed from every row and every JSON document that names one).
constexpr std::array<int8_t, 256> kHexValue = [] {
  std::array<int8_t, 256> t{};
  t.fill(-1);
  for (int c = '0'; c <= '9'; ++c) t[static_cast<size_t>(c)] = static_cast<int8_t>(c - '0');
  for (int c = 'a'; c <= 'f'; ++c) t[static_cast<size_t>(c)] = static_cast<int8_t>(c - 'a' + 10);
  for (int c = 'A'; c <= 'F'; ++c) t[static_cast<size_t>(c)] = static_cast<int8_t>(c - 'A' + 10);
  return t;
}();

int HexValue(char c) { return kHexValue[static_cast<unsigned char>(c)]; }
}  // namespace

std::optional<Uuid> Uuid::Parse(std::string_view text) {
  if (text.size() != 36) return std::nullopt;
  if (text[8] != '-' || text[13] != '-' || text[18] != '-' || text[23] != '-') return std::nullopt;
  // Where each byte's two digits start.
  static constexpr std::array<uint8_t, 16> kAt{0,  2,  4,  6,  9,  11, 14, 16,
                                               19, 21, 24, 26, 28, 30, 32, 34};
  Uuid u;
  int bad = 0;
  for (size_t b = 0; b < 16; ++b) {
    const int hi = HexValue(text[kAt[b]]);
    const int lo = HexValue(text[kAt[b] + 1u]);
    bad |= hi | lo;  // negative if either is not a digit
    u.bytes_[b] = static_cast<uint8_t>(hi * 16 + lo);
  }
  if (bad < 0) return std::nullopt;
  return u;
}

std::string Uuid::ToString() const {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(36, '-');  // the hex digits written over it, the dashes left
  size_t at = 0;
  for (size_t i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) ++at;
    out[at++] = kHex[bytes_[i] >> 4];
    out[at++] = kHex[bytes_[i] & 0xf];
  }
  return out;
}

}  // namespace fp
