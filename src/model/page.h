#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace fp::model {

// How a list is ordered, and where the previous page ended.
enum class SortOrder { kNameAscending, kNameDescending, kIdAscending };
struct PageRequest {
  SortOrder order = SortOrder::kNameAscending;
  std::optional<std::string> after;  // the sort key of the last item already returned
  int64_t limit = 100;
};

}  // namespace fp::model
