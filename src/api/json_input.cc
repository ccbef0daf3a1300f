#include "api/json_input.h"

#include <fmt/format.h>

namespace fp::api {

Error BodyError(std::string_view field, std::string_view message) {
  return Error::InvalidRequest(
      fmt::format("unable to parse JSON body: field \"{}\": {}", field, message));
}

Result<Json> ParseBodyObject(const std::string& body, bool allow_empty) {
  if (body.empty() && allow_empty) return Json::object();
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    // Re-parse with exceptions only to obtain the position of the syntax error.
    std::string where;
    try {
      Json ignored = Json::parse(body);
      (void)ignored;
    } catch (const Json::parse_error& e) {
      where = fmt::format(" (at byte {})", e.byte);
    }
    return Fail(Error::InvalidRequest(
        fmt::format("unable to parse JSON body: the request body is not valid JSON{}", where)));
  }
  if (!j.is_object()) {
    return Fail(Error::InvalidRequest("unable to parse JSON body: expected a JSON object"));
  }
  return j;
}

namespace {
std::string_view TypeName(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float:
      return "a number";
    default:
      return "an unsupported value";
  }
}
}  // namespace

std::string Fields::FieldPath(std::string_view field) const {
  return path_.empty() ? std::string(field) : fmt::format("{}.{}", path_, field);
}

bool Fields::Has(std::string_view field) const { return obj_.contains(field); }

bool Fields::IsNullOrAbsent(std::string_view field) const {
  auto it = obj_.find(field);
  return it == obj_.end() || it->is_null();
}

Result<const Json*> Fields::Get(std::string_view field) const {
  auto it = obj_.find(field);
  if (it == obj_.end()) {
    return Fail(Error::InvalidRequest(
        fmt::format("unable to parse JSON body: missing field \"{}\"", FieldPath(field))));
  }
  return &*it;
}

Error Fields::TypeError(std::string_view field, std::string_view expected) const {
  auto it = obj_.find(field);
  return BodyError(FieldPath(field),
                   fmt::format("expected {}, got {}", expected,
                               it == obj_.end() ? std::string_view("nothing") : TypeName(*it)));
}

Result<std::string> Fields::String(std::string_view field) const {
  const Json* v = FP_TRY(Get(field));
  if (!v->is_string()) return Fail(TypeError(field, "a string"));
  return v->get<std::string>();
}

Result<std::optional<std::string>> Fields::OptString(std::string_view field) const {
  if (IsNullOrAbsent(field)) return std::optional<std::string>();
  return std::optional<std::string>(FP_TRY(String(field)));
}

Result<std::string> Fields::Description(std::string_view field) const {
  std::string s = FP_TRY(String(field));
  if (s.size() > 512) {
    return Fail(BodyError(FieldPath(field),
                          fmt::format("may contain at most 512 characters (got {})", s.size())));
  }
  return s;
}

Result<std::optional<std::string>> Fields::OptDescription(std::string_view field) const {
  if (IsNullOrAbsent(field)) return std::optional<std::string>();
  return std::optional<std::string>(FP_TRY(Description(field)));
}

Result<bool> Fields::Bool(std::string_view field) const {
  const Json* v = FP_TRY(Get(field));
  if (!v->is_boolean()) return Fail(TypeError(field, "a boolean"));
  return v->get<bool>();
}

Result<std::optional<bool>> Fields::OptBool(std::string_view field) const {
  if (IsNullOrAbsent(field)) return std::optional<bool>();
  return std::optional<bool>(FP_TRY(Bool(field)));
}

Result<Name> Fields::NameField(std::string_view field) const {
  std::string s = FP_TRY(String(field));
  auto name = Name::Parse(s);
  if (!name) return Fail(BodyError(FieldPath(field), name.error().message()));
  return *name;
}

Result<std::optional<Name>> Fields::OptName(std::string_view field) const {
  if (IsNullOrAbsent(field)) return std::optional<Name>();
  return std::optional<Name>(FP_TRY(NameField(field)));
}

Result<NameOrId> Fields::NameOrIdField(std::string_view field) const {
  std::string s = FP_TRY(String(field));
  auto v = NameOrId::Parse(s);
  if (!v) return Fail(BodyError(FieldPath(field), v.error().message()));
  return *v;
}

Result<IpAddr> Fields::Ip(std::string_view field) const {
  std::string s = FP_TRY(String(field));
  auto ip = IpAddr::Parse(s);
  if (!ip) return Fail(BodyError(FieldPath(field), ip.error().message()));
  return *ip;
}

Result<Fields> Fields::Object(std::string_view field) const {
  const Json* v = FP_TRY(Get(field));
  if (!v->is_object()) return Fail(TypeError(field, "an object"));
  return Fields(*v, FieldPath(field));
}

Result<std::string> PercentDecode(std::string_view in, bool plus_is_space) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '%') {
      auto hex = [](char h) -> int {
        if (h >= '0' && h <= '9') return h - '0';
        if (h >= 'a' && h <= 'f') return h - 'a' + 10;
        if (h >= 'A' && h <= 'F') return h - 'A' + 10;
        return -1;
      };
      int hi = i + 1 < in.size() ? hex(in[i + 1]) : -1;
      int lo = i + 2 < in.size() ? hex(in[i + 2]) : -1;
      if (hi < 0 || lo < 0) return Fail(Error::InvalidRequest("invalid percent-encoding"));
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

Result<Query> Query::Parse(const std::string& raw) {
  Query q;
  size_t pos = 0;
  while (pos <= raw.size() && !raw.empty()) {
    size_t amp = raw.find('&', pos);
    std::string_view part(raw.data() + pos, (amp == std::string::npos ? raw.size() : amp) - pos);
    if (!part.empty()) {
      size_t eq = part.find('=');
      auto key = PercentDecode(part.substr(0, eq), true);
      auto value = PercentDecode(eq == std::string_view::npos ? "" : part.substr(eq + 1), true);
      if (!key || !value) {
        return Fail(
            Error::InvalidRequest("unable to parse query string: invalid percent-encoding"));
      }
      q.values_[*key] = *value;
    }
    if (amp == std::string::npos) break;
    pos = amp + 1;
  }
  return q;
}

std::optional<std::string> Query::Get(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

Result<std::optional<NameOrId>> Query::OptNameOrId(const std::string& key) const {
  auto v = Get(key);
  if (!v) return std::optional<NameOrId>();
  auto parsed = NameOrId::Parse(*v);
  if (!parsed) {
    return Fail(Error::InvalidRequest(fmt::format(
        "unable to parse query string: parameter \"{}\": {}", key, parsed.error().message())));
  }
  return std::optional<NameOrId>(*parsed);
}

Result<NameOrId> Query::RequiredNameOrId(const std::string& key) const {
  auto v = FP_TRY(OptNameOrId(key));
  if (!v) {
    return Fail(Error::InvalidRequest(
        fmt::format("unable to parse query string: missing parameter \"{}\"", key)));
  }
  return *v;
}

Result<std::optional<IpVersion>> Query::OptIpVersion(const std::string& key) const {
  auto v = Get(key);
  if (!v) return std::optional<IpVersion>();
  auto parsed = ParseIpVersion(*v);
  if (!parsed) {
    return Fail(Error::InvalidRequest(fmt::format(
        "unable to parse query string: parameter \"{}\": expected \"v4\" or \"v6\"", key)));
  }
  return std::optional<IpVersion>(*parsed);
}

}  // namespace fp::api
