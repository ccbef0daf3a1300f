#pragma once

#include <string_view>
#include <vector>

namespace fp {

// The non-empty segments of a URL path: "/v1//ip-pools/x/" -> {"v1", "ip-pools", "x"}. The
// views point into `path`.
inline std::vector<std::string_view> PathSegments(std::string_view path) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while (pos < path.size()) {
    if (path[pos] == '/') {
      ++pos;
      continue;
    }
    size_t next = path.find('/', pos);
    if (next == std::string_view::npos) next = path.size();
    out.push_back(path.substr(pos, next - pos));
    pos = next;
  }
  return out;
}

}  // namespace fp
