#include "common/time.h"

#include <fmt/format.h>

#include <ctime>

namespace fp {

Timestamp SystemClock::Now() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string FormatRfc3339(Timestamp t) {
  time_t secs = static_cast<time_t>(t / 1000000);
  int64_t micros = t % 1000000;
  if (micros < 0) {
    micros += 1000000;
    --secs;
  }
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, micros);
}

}  // namespace fp
