#pragma once

// A clock that moves only when told: by the test (Advance), or by a sleep through it, which
// passes the sleeper's time at once. Wall and monotonic time move together. Threads waiting on
// it with a deadline (Clock::WaitUntil) see an Advance within a few milliseconds of real time:
// they wait in short real slices, since the clock cannot reach their mutexes to wake them.

#include <atomic>
#include <chrono>

#include "common/clock.h"

namespace fp::testing {

// One second of a Timestamp (microseconds), for moving a ManualClock.
inline constexpr int64_t kSecond = 1'000'000;

class ManualClock final : public Clock {
 public:
  explicit ManualClock(Timestamp start = 1'800'000'000'000'000) : wall_(start) {}

  Timestamp Now() const override { return wall_.load(); }
  MonoTime Monotonic() const override { return MonoTime(MonoDuration(mono_.load())); }
  void SleepFor(MonoDuration d) const override {
    if (d > MonoDuration::zero()) Move(d);
  }
  void BlockUntil(MutexLock& lock, std::condition_variable& cv, MonoTime deadline) const override {
    if (Monotonic() < deadline) cv.wait_for(lock.lock_, std::chrono::milliseconds(2));
  }

  // Moves both times forward by `micros` microseconds (a negative value steps wall time back
  // and leaves monotonic time where it is, as a stepped system clock would).
  void Advance(int64_t micros) {
    if (micros < 0) {
      wall_.fetch_add(micros);
      return;
    }
    Move(std::chrono::microseconds(micros));
  }
  template <typename Rep, typename Period>
  void Advance(std::chrono::duration<Rep, Period> d) {
    Advance(std::chrono::duration_cast<std::chrono::microseconds>(d).count());
  }

 private:
  void Move(MonoDuration d) const {
    mono_.fetch_add(d.count());
    wall_.fetch_add(std::chrono::duration_cast<std::chrono::microseconds>(d).count());
  }

  // Sleeps move a const clock: the time is the clock's state, not its identity.
  mutable std::atomic<Timestamp> wall_;
  mutable std::atomic<MonoDuration::rep> mono_{
      std::chrono::duration_cast<MonoDuration>(std::chrono::hours(1)).count()};
};

}  // namespace fp::testing
