#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fp {

// Microseconds since the Unix epoch, UTC. The datastore stores timestamps in this form.
using Timestamp = int64_t;

// RFC 3339 with microseconds and a `Z` suffix, e.g. 2026-11-29T15:24:39.123456Z.
std::string FormatRfc3339(Timestamp t);
// Parses an RFC 3339 date-time ("2026-11-29T15:24:39Z", with up to 9 fraction digits, and `Z`
// or an offset such as +01:00); nullopt if it is not one. Fractions below a microsecond are
// dropped.
std::optional<Timestamp> ParseRfc3339(std::string_view text);

}  // namespace fp
