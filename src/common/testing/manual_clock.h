#pragma once

// Test helper: a clock that moves only when the test moves it.

#include <atomic>

#include "common/time.h"

namespace fp::testing {

// One second of a Timestamp (microseconds), for moving a ManualClock.
inline constexpr int64_t kSecond = 1'000'000;

class ManualClock final : public Clock {
 public:
  explicit ManualClock(Timestamp start = 1'800'000'000'000'000) : now_(start) {}
  Timestamp Now() const override { return now_.load(); }
  void Advance(int64_t micros) { now_.fetch_add(micros); }

 private:
  std::atomic<Timestamp> now_;
};

}  // namespace fp::testing
