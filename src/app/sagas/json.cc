#include "app/sagas/json.h"

namespace fp {

namespace {

[[noreturn]] void Malformed(const nlohmann::json& j, std::string_view what) {
  throw nlohmann::json::other_error::create(501, fmt::format("{} is not {}", j.dump(), what), &j);
}

}  // namespace

const std::string& JsonText(const nlohmann::json& j) { return j.get_ref<const std::string&>(); }

void to_json(nlohmann::json& j, const Uuid& v) { j = v.ToString(); }

void from_json(const nlohmann::json& j, Uuid& v) {
  auto id = Uuid::Parse(JsonText(j));
  if (!id) Malformed(j, "a UUID");
  v = *id;
}

void to_json(nlohmann::json& j, const IpAddr& v) { j = v.ToString(); }

void from_json(const nlohmann::json& j, IpAddr& v) {
  auto ip = IpAddr::Parse(JsonText(j));
  if (!ip) Malformed(j, "an IP address");
  v = *ip;
}

void to_json(nlohmann::json& j, const IpVersion& v) { j = ToString(v); }

void from_json(const nlohmann::json& j, IpVersion& v) {
  auto version = ParseIpVersion(JsonText(j));
  if (!version) Malformed(j, "an IP version");
  v = *version;
}

}  // namespace fp

namespace nlohmann {

void adl_serializer<fp::NameOrId>::to_json(json& j, const fp::NameOrId& v) { j = v.ToString(); }

fp::NameOrId adl_serializer<fp::NameOrId>::from_json(const json& j) {
  auto v = fp::NameOrId::Parse(j.get_ref<const std::string&>());
  if (!v) fp::Malformed(j, "a name or id");
  return *v;
}

}  // namespace nlohmann

namespace fp::app {

model::PoolSelector SelectorOf(const std::optional<NameOrId>& pool,
                               const std::optional<IpVersion>& ip_version) {
  model::PoolSelector s;
  if (pool) {
    s.mode = model::PoolSelector::Mode::kExplicitPool;
    s.pool = pool;
  } else {
    s.ip_version = ip_version;
  }
  return s;
}

std::pair<std::optional<NameOrId>, std::optional<IpVersion>> SelectorFields(
    const model::PoolSelector& selector) {
  if (selector.mode == model::PoolSelector::Mode::kExplicitPool) return {selector.pool, {}};
  return {std::nullopt, selector.ip_version};
}

}  // namespace fp::app
