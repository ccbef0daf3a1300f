#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace fp {

// Microseconds since the Unix epoch, UTC. The datastore stores timestamps in this form.
using Timestamp = int64_t;

// The time source; a seam so tests can control time (Envoy's TimeSource).
class Clock {
 public:
  virtual ~Clock() = default;
  virtual Timestamp Now() const = 0;
};

class SystemClock final : public Clock {
 public:
  Timestamp Now() const override;
};

// RFC 3339 with microseconds and a `Z` suffix, e.g. 2026-11-29T15:24:39.123456Z.
std::string FormatRfc3339(Timestamp t);

}  // namespace fp
