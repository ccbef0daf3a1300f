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

IpKind ParseIpKind(std::string_view text) {
  return text == "snat"        ? IpKind::kSnat
         : text == "ephemeral" ? IpKind::kEphemeral
                               : IpKind::kFloating;
}

AttachState ParseAttachState(std::string_view text) {
  return text == "attached"    ? AttachState::kAttached
         : text == "attaching" ? AttachState::kAttaching
         : text == "detaching" ? AttachState::kDetaching
                               : AttachState::kDetached;
}

}  // namespace fp::model
