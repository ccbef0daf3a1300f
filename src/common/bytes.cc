#include "common/bytes.h"

#include <fmt/format.h>

#include <utility>

namespace fp {

std::string ShowByteCount(uint64_t bytes) {
  constexpr std::pair<uint64_t, const char*> kUnits[] = {
      {uint64_t{1} << 40, "TiB"}, {uint64_t{1} << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}};
  for (const auto& [unit, name] : kUnits) {
    if (bytes >= unit && bytes % unit == 0) return fmt::format("{} {}", bytes / unit, name);
  }
  return fmt::format("{} B", bytes);
}

}  // namespace fp
