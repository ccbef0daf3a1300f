#include "common/random.h"

#include <array>
#include <cstring>

namespace fp {

namespace {

uint64_t SplitMix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

void FillFromNext(Random& random, uint8_t* out, size_t n) {
  while (n > 0) {
    uint64_t v = random.Next();
    size_t k = std::min(n, sizeof v);
    std::memcpy(out, &v, k);
    out += k;
    n -= k;
  }
}

}  // namespace

uint64_t Random::Below(uint64_t bound) { return bound == 0 ? 0 : Next() % bound; }

Uuid Random::NewUuid() {
  std::array<uint8_t, 16> b{};
  Fill(b.data(), b.size());
  return Uuid::FromBytesV4(b);
}

Uuid Random::NewTimeOrderedUuid(Timestamp now) {
  std::array<uint8_t, 16> b{};
  Fill(b.data() + 6, b.size() - 6);
  return Uuid::FromBytesV7(static_cast<uint64_t>(now / 1000), b);
}

uint64_t SystemRandom::Next() { return JitterBelow(~uint64_t{0}); }

void SystemRandom::Fill(uint8_t* out, size_t n) { RandomBytes(out, n); }

Random& MachineRandom() {
  static SystemRandom random;
  return random;
}

uint64_t SeededRandom::Next() {
  MutexLock lock(mu_);
  state_ += kGolden;
  return SplitMix(state_);
}

void SeededRandom::Fill(uint8_t* out, size_t n) { FillFromNext(*this, out, n); }

}  // namespace fp
