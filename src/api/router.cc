#include "api/router.h"

#include "api/json_input.h"

namespace fp::api {

bool DecodePathSegment(const std::string& raw, std::string& out) {
  auto decoded = PercentDecode(raw, false);
  if (!decoded) return false;
  out = std::move(*decoded);
  return true;
}

}  // namespace fp::api
