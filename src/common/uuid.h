#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fp {

// A 128-bit identifier. New ids are random (version 4) or time-ordered (version 7); the
// canonical text form is lowercase 8-4-4-4-12 hex, which is also how the datastore stores them.
class Uuid {
 public:
  Uuid() = default;

  // Returns a fresh random (v4) id from the kernel. Thread-safe. For tests' fixtures and
  // SystemRandom: the product draws its ids through an injected fp::Random (common/random.h).
  static Uuid Random();
  // Returns a fresh time-ordered (RFC 9562 version 7) id: 48 bits of Unix time in milliseconds,
  // then random bits. Ids made later sort after earlier ones (within a millisecond, in any
  // order), so a table keyed by them grows at its end: a write touches the same few B-tree pages
  // as the writes just before it instead of a random leaf each. Thread-safe.
  static Uuid TimeOrdered();
  // A version 4 id made of `bytes` (its version and variant bits set).
  static Uuid FromBytesV4(std::array<uint8_t, 16> bytes);
  // A version 7 id for Unix time `unix_ms`, its other bits from `bytes` (the first six ignored).
  static Uuid FromBytesV7(uint64_t unix_ms, std::array<uint8_t, 16> bytes);
  // Accepts the 36-character hyphenated form, any hex case. std::nullopt otherwise.
  static std::optional<Uuid> Parse(std::string_view text);

  std::string ToString() const;
  bool IsNil() const { return bytes_ == std::array<uint8_t, 16>{}; }

  auto operator<=>(const Uuid&) const = default;

 private:
  std::array<uint8_t, 16> bytes_{};
};

// Fills `out` with cryptographically random bytes (getrandom). Aborts if the kernel refuses.
void RandomBytes(uint8_t* out, size_t n);
// A value spread evenly over [0, bound) (0 when bound is 0), for SystemRandom: not
// for secrets or ids. One process-wide sequence seeded once from RandomBytes, so a thread that
// retries needs no generator of its own and no system call. Thread-safe.
uint64_t JitterBelow(uint64_t bound);

}  // namespace fp
