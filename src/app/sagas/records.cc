#include "app/sagas/records.h"

#include <fmt/format.h>

namespace fp::model {

namespace {

[[noreturn]] void Unknown(const nlohmann::json& j, std::string_view what) {
  throw nlohmann::json::other_error::create(501, fmt::format("unknown {} {}", what, j.dump()), &j);
}

}  // namespace

void to_json(nlohmann::json& j, const InstanceState& v) { j = ToString(v); }

void from_json(const nlohmann::json& j, InstanceState& v) {
  auto state = ParseInstanceState(JsonText(j));
  if (!state) Unknown(j, "instance state");
  v = *state;
}

void to_json(nlohmann::json& j, const RunState& v) { j = ToString(v); }
void from_json(const nlohmann::json& j, RunState& v) {
  auto state = ParseRunState(JsonText(j));
  if (!state) Unknown(j, "run state");
  v = *state;
}

void to_json(nlohmann::json& j, const IpKind& v) { j = ToString(v); }
void from_json(const nlohmann::json& j, IpKind& v) {
  auto kind = ParseIpKind(JsonText(j));
  if (!kind) Unknown(j, "external IP kind");
  v = *kind;
}
void to_json(nlohmann::json& j, const AttachState& v) { j = ToString(v); }
void from_json(const nlohmann::json& j, AttachState& v) {
  auto state = ParseAttachState(JsonText(j));
  if (!state) Unknown(j, "external IP state");
  v = *state;
}

namespace {
constexpr std::pair<NicKind, std::string_view> kNicNames[] = {{NicKind::kIpv4, "ipv4"},
                                                              {NicKind::kIpv6, "ipv6"},
                                                              {NicKind::kDualStack, "dual_stack"},
                                                              {NicKind::kNone, "none"}};
}  // namespace

void to_json(nlohmann::json& j, const NicKind& v) {
  for (const auto& [kind, name] : kNicNames) {
    if (kind == v) j = name;
  }
}

void from_json(const nlohmann::json& j, NicKind& v) {
  for (const auto& [kind, name] : kNicNames) {
    if (name == JsonText(j)) {
      v = kind;
      return;
    }
  }
  Unknown(j, "NIC kind");
}

}  // namespace fp::model
