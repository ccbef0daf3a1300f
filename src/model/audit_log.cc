#include "model/audit_log.h"

namespace fp::model {

std::string_view ToString(AuditResultKind k) {
  switch (k) {
    case AuditResultKind::kSuccess:
      return "success";
    case AuditResultKind::kError:
      return "error";
    case AuditResultKind::kUnknown:
      return "unknown";
  }
  return "unknown";
}

std::optional<AuditResultKind> ParseAuditResultKind(std::string_view text) {
  for (AuditResultKind k :
       {AuditResultKind::kSuccess, AuditResultKind::kError, AuditResultKind::kUnknown}) {
    if (ToString(k) == text) return k;
  }
  return std::nullopt;
}

}  // namespace fp::model
