#include "common/random.h"

#include <pthread.h>

#include <algorithm>
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

// The kernel's random bytes, drawn a block at a time: an id or a token takes its bytes from the
// block instead of a getrandom call of its own (an attach and a detach drew nine). Each byte is
// the kernel's and handed out once (then cleared), so they are as fit for secrets as a call per
// draw. A child of fork() starts with no block: it never hands out bytes its parent will.
class KernelBytes {
 public:
  static KernelBytes& Get() {
    static KernelBytes* const bytes = new KernelBytes();  // never destroyed: used until exit
    return *bytes;
  }

  void Take(uint8_t* out, size_t n) {
    if (n >= kBlock) {
      RandomBytes(out, n);
      return;
    }
    MutexLock lock(mu_);
    while (n > 0) {
      if (left_ == 0) {
        RandomBytes(block_.data(), block_.size());
        left_ = block_.size();
      }
      uint8_t* from = block_.data() + (block_.size() - left_);
      const size_t k = std::min(n, left_);
      std::memcpy(out, from, k);
      std::memset(from, 0, k);
      left_ -= k;
      out += k;
      n -= k;
    }
  }

 private:
  static constexpr size_t kBlock = 256;

  KernelBytes() { pthread_atfork(&BeforeFork, &AfterForkInParent, &AfterForkInChild); }
  // Held across fork() so that the child's copy of the block is not half taken.
  static void BeforeFork() FP_NO_THREAD_SAFETY_ANALYSIS { Get().mu_.lock(); }
  static void AfterForkInParent() FP_NO_THREAD_SAFETY_ANALYSIS { Get().mu_.unlock(); }
  static void AfterForkInChild() FP_NO_THREAD_SAFETY_ANALYSIS {
    KernelBytes& k = Get();
    k.block_.fill(0);
    k.left_ = 0;
    k.mu_.unlock();
  }

  Mutex mu_;
  std::array<uint8_t, kBlock> block_ FP_GUARDED_BY(mu_){};
  size_t left_ FP_GUARDED_BY(mu_) = 0;  // the block's last `left_` bytes are not handed out yet
};

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

void SystemRandom::Fill(uint8_t* out, size_t n) { KernelBytes::Get().Take(out, n); }

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
