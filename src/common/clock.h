#pragma once

// The one source of time (Envoy's TimeSource, TigerBeetle's Time): wall time for what is stored
// and shown, monotonic time for deadlines, periods and durations, and the sleeps and timed waits
// that pass it. Every part reads time and waits through an injected Clock; only common/ and the
// composition root (cmd/, main.cc) name the standard library's clocks or sleep directly
// (scripts/check-seams proves it). The machine's clock is SystemClock; tests and the simulation
// move a ManualClock (common/testing/manual_clock.h) themselves.

#include <chrono>
#include <condition_variable>

#include "common/mutex.h"
#include "common/time.h"

namespace fp {

// A point of monotonic time: it never steps back, and means nothing across processes.
using MonoTime = std::chrono::steady_clock::time_point;
using MonoDuration = std::chrono::steady_clock::duration;

class Clock {
 public:
  virtual ~Clock() = default;

  // Wall time (microseconds since the Unix epoch, UTC): what the datastore stores.
  virtual Timestamp Now() const = 0;
  // Monotonic time: what deadlines, periods and measured durations are made of.
  virtual MonoTime Monotonic() const = 0;
  // Blocks the calling thread until `d` of this clock's time has passed.
  virtual void SleepFor(MonoDuration d) const = 0;
  // Blocks on `cv` (whose mutex `lock` holds; released while blocked) until it is notified or
  // this clock reaches `deadline`; may return early, as a condition variable may.
  virtual void BlockUntil(MutexLock& lock, std::condition_variable& cv,
                          MonoTime deadline) const = 0;

  // Waits on `cv` until `done()` holds (true) or this clock reaches `deadline` (done()'s value
  // then). `done` runs with the lock held. (The analysis cannot see that `lock` holds the mutex
  // a predicate requires: the predicates say FP_REQUIRES themselves.)
  template <typename Done>
  bool WaitUntil(MutexLock& lock, std::condition_variable& cv, MonoTime deadline,
                 Done done) const FP_NO_THREAD_SAFETY_ANALYSIS {
    while (!done()) {
      if (Monotonic() >= deadline) return done();
      BlockUntil(lock, cv, deadline);
    }
    return true;
  }
  template <typename Rep, typename Period, typename Done>
  bool WaitFor(MutexLock& lock, std::condition_variable& cv,
               std::chrono::duration<Rep, Period> timeout, Done done) const {
    return WaitUntil(lock, cv, Deadline(timeout), std::move(done));
  }

  // This clock's monotonic time `d` from now.
  template <typename Rep, typename Period>
  MonoTime Deadline(std::chrono::duration<Rep, Period> d) const {
    return Monotonic() + std::chrono::duration_cast<MonoDuration>(d);
  }
  // How long is left until `deadline` (zero once it has passed).
  MonoDuration Left(MonoTime deadline) const {
    return std::max(deadline - Monotonic(), MonoDuration::zero());
  }
};

// The machine's clocks: the system's wall clock, its steady clock, and real sleeps.
class SystemClock final : public Clock {
 public:
  Timestamp Now() const override;
  MonoTime Monotonic() const override;
  void SleepFor(MonoDuration d) const override;
  void BlockUntil(MutexLock& lock, std::condition_variable& cv, MonoTime deadline) const override;
};

// One SystemClock for the process: what an option that takes a clock means when left unset
// (the sockets of http/, whose waits are the kernel's, and tests that need no other time).
const Clock& MachineClock();

}  // namespace fp
