#include "common/clock.h"

#include <thread>

namespace fp {

Timestamp SystemClock::Now() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

MonoTime SystemClock::Monotonic() const { return std::chrono::steady_clock::now(); }

void SystemClock::SleepFor(MonoDuration d) const {
  if (d > MonoDuration::zero()) std::this_thread::sleep_for(d);
}

void SystemClock::BlockUntil(MutexLock& lock, std::condition_variable& cv,
                             MonoTime deadline) const {
  cv.wait_until(lock.lock_, deadline);
}

const Clock& MachineClock() {
  static const SystemClock clock;
  return clock;
}

}  // namespace fp
