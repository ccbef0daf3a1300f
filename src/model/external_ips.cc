#include "model/external_ips.h"

namespace fp::model {

std::string_view ToString(IpKind k) {
  switch (k) {
    case IpKind::kSnat:
      return "snat";
    case IpKind::kEphemeral:
      return "ephemeral";
    case IpKind::kFloating:
      return "floating";
  }
  return "floating";
}

std::string_view ToString(AttachState s) {
  switch (s) {
    case AttachState::kDetached:
      return "detached";
    case AttachState::kAttaching:
      return "attaching";
    case AttachState::kAttached:
      return "attached";
    case AttachState::kDetaching:
      return "detaching";
  }
  return "detached";
}

std::optional<IpKind> ParseIpKind(std::string_view text) {
  for (IpKind k : {IpKind::kSnat, IpKind::kEphemeral, IpKind::kFloating}) {
    if (text == ToString(k)) return k;
  }
  return std::nullopt;
}

std::optional<AttachState> ParseAttachState(std::string_view text) {
  for (AttachState s : {AttachState::kDetached, AttachState::kAttaching, AttachState::kAttached,
                        AttachState::kDetaching}) {
    if (text == ToString(s)) return s;
  }
  return std::nullopt;
}

}  // namespace fp::model
