#include "common/name.h"

#include <fmt/format.h>

namespace fp {

namespace {
bool IsLower(char c) { return c >= 'a' && c <= 'z'; }
bool IsAlnum(char c) { return IsLower(c) || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }
}  // namespace

Result<Name> Name::Parse(std::string_view text) {
  if (text.empty()) return Fail(Error::InvalidRequest("name requires at least one character"));
  if (text.size() > 63) {
    return Fail(Error::InvalidRequest(
        fmt::format("name may contain at most 63 characters (got {})", text.size())));
  }
  if (Uuid::Parse(text)) return Fail(Error::InvalidRequest("name cannot be a UUID"));
  if (!IsLower(text.front())) {
    return Fail(Error::InvalidRequest("name must begin with an ASCII lowercase character"));
  }
  for (char c : text) {
    if (!IsAlnum(c) && c != '-') {
      return Fail(Error::InvalidRequest(
          "name contains an invalid character: names may contain only ASCII letters, digits "
          "and '-'"));
    }
  }
  if (text.back() == '-') return Fail(Error::InvalidRequest("name cannot end with a hyphen"));
  return Name(std::string(text));
}

Result<NameOrId> NameOrId::Parse(std::string_view text) {
  if (auto id = Uuid::Parse(text)) return NameOrId(*id);
  auto name = Name::Parse(text);
  if (!name) {
    return Fail(Error::InvalidRequest(
        fmt::format("expected a UUID or a name: {}", name.error().message())));
  }
  return NameOrId(std::move(*name));
}

}  // namespace fp
