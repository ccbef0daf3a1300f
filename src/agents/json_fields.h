#pragma once

// Internal to the agents' codecs (wire_json.cc, nat_buckets.cc): typed reading of a JSON
// object's fields, and the decoder of a NAT entry they share.

#include <fmt/format.h>

#include <cctype>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agents/agents.h"

namespace fp::agents::wire {

using Json = nlohmann::json;

constexpr int64_t kMaxVni = (int64_t{1} << 24) - 1;

// A 64-bit hash of `text` that every build computes alike (it is on the wire: digests).
uint64_t HashText(std::string_view text);

// A digest as the wire carries it (FormatNatDigest: 16 hex digits), at field `path`.
Result<uint64_t> ParseDigest(const Json& j, std::string_view path);

// Typed access to the fields of one JSON object; every error is InvalidRequest and names the
// field by its full path (e.g. `field "entries[2].first_port": expected an integer`).
class JsonFields {
 public:
  static Result<JsonFields> Of(const Json& j, std::string path) {
    if (!j.is_object()) {
      return Fail(Error::InvalidRequest(
          path.empty() ? std::string("expected a JSON object")
                       : fmt::format("field \"{}\": expected an object", path)));
    }
    return JsonFields(j, std::move(path));
  }

  std::string PathOf(std::string_view field) const {
    return path_.empty() ? std::string(field) : fmt::format("{}.{}", path_, field);
  }

  Error Invalid(std::string_view field, std::string_view problem) const {
    return Error::InvalidRequest(fmt::format("field \"{}\": {}", PathOf(field), problem));
  }

  bool IsNullOrAbsent(std::string_view field) const {
    auto it = obj_.find(field);
    return it == obj_.end() || it->is_null();
  }

  Result<const Json*> Get(std::string_view field) const {
    auto it = obj_.find(field);
    if (it == obj_.end()) {
      return Fail(Error::InvalidRequest(fmt::format("missing field \"{}\"", PathOf(field))));
    }
    return &*it;
  }

  Result<std::string> String(std::string_view field) const {
    const Json* v = FP_TRY(Get(field));
    if (!v->is_string()) return Fail(Invalid(field, "expected a string"));
    return v->get<std::string>();
  }

  Result<int64_t> Int(std::string_view field, int64_t min, int64_t max) const {
    const Json* v = FP_TRY(Get(field));
    if (!v->is_number_integer()) return Fail(Invalid(field, "expected an integer"));
    if (v->is_number_unsigned() &&
        v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Fail(Invalid(field, fmt::format("expected an integer from {} to {}", min, max)));
    }
    int64_t n = v->get<int64_t>();
    if (n < min || n > max) {
      return Fail(Invalid(field, fmt::format("expected an integer from {} to {}", min, max)));
    }
    return n;
  }

  Result<int64_t> OptInt(std::string_view field, int64_t min, int64_t max, int64_t absent) const {
    if (IsNullOrAbsent(field)) return absent;
    return Int(field, min, max);
  }

  Result<bool> Bool(std::string_view field) const {
    const Json* v = FP_TRY(Get(field));
    if (!v->is_boolean()) return Fail(Invalid(field, "expected a boolean"));
    return v->get<bool>();
  }

  Result<IpAddr> Ip(std::string_view field) const {
    std::string text = FP_TRY(String(field));
    auto ip = IpAddr::Parse(text);
    if (!ip) return Fail(Invalid(field, ip.error().message()));
    return *ip;
  }

  Result<std::optional<IpAddr>> OptIp(std::string_view field) const {
    if (IsNullOrAbsent(field)) return std::optional<IpAddr>();
    return Ip(field);
  }

  Result<std::optional<std::string>> OptString(std::string_view field) const {
    if (IsNullOrAbsent(field)) return std::optional<std::string>();
    return String(field);
  }

  Result<Uuid> Id(std::string_view field) const {
    std::string text = FP_TRY(String(field));
    auto id = Uuid::Parse(text);
    if (!id) return Fail(Invalid(field, fmt::format("invalid UUID \"{}\"", text)));
    return *id;
  }

  Result<uint64_t> Digest(std::string_view field) const {
    return ParseDigest(*FP_TRY(Get(field)), PathOf(field));
  }

  Result<std::string> Mac(std::string_view field) const {
    std::string text = FP_TRY(String(field));
    bool ok = text.size() == 17;
    for (size_t i = 0; ok && i < text.size(); ++i) {
      ok = i % 3 == 2 ? text[i] == ':' : std::isxdigit(static_cast<unsigned char>(text[i])) != 0;
    }
    if (!ok) {
      return Fail(Invalid(field, fmt::format("invalid MAC address \"{}\" (expected "
                                             "six hex pairs separated by ':')",
                                             text)));
    }
    for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return text;
  }

  // The elements of an array-valued field, each with its path ("entries[2]").
  Result<std::vector<std::pair<const Json*, std::string>>> Array(std::string_view field) const {
    const Json* v = FP_TRY(Get(field));
    if (!v->is_array()) return Fail(Invalid(field, "expected an array"));
    std::vector<std::pair<const Json*, std::string>> out;
    out.reserve(v->size());
    for (size_t i = 0; i < v->size(); ++i) {
      out.emplace_back(&(*v)[i], fmt::format("{}[{}]", PathOf(field), i));
    }
    return out;
  }

  Result<std::vector<IpAddr>> IpList(std::string_view field) const {
    std::vector<IpAddr> out;
    for (const auto& [element, path] : FP_TRY(Array(field))) {
      if (!element->is_string()) {
        return Fail(Error::InvalidRequest(fmt::format("field \"{}\": expected a string", path)));
      }
      auto ip = IpAddr::Parse(element->get<std::string>());
      if (!ip) {
        return Fail(
            Error::InvalidRequest(fmt::format("field \"{}\": {}", path, ip.error().message())));
      }
      out.push_back(*ip);
    }
    return out;
  }

 private:
  JsonFields(const Json& obj, std::string path) : obj_(obj), path_(std::move(path)) {}

  const Json& obj_;
  std::string path_;
};

// A NatEntry at `path` ("entries[2]"; "" at the top).
Result<NatEntry> ParseNatEntry(const Json& j, std::string path);

}  // namespace fp::agents::wire
