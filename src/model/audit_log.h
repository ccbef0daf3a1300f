#pragma once

// The audit log: one entry per mutating request (and per failed authentication), in Oxide's
// shape (AuditLogEntry of the OpenAPI subset). An entry describes the whole request, from its
// arrival to its answer; it is written with the effect it describes (db/request_effect.h).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/time.h"
#include "common/uuid.h"

namespace fp::model {

enum class AuditResultKind {
  kSuccess,  // the request succeeded with `http_status`
  kError,    // it failed: `http_status`, `error_code`, `error_message`
  kUnknown,  // its end was never recorded (the server stopped first); completed by recovery
};
std::string_view ToString(AuditResultKind k);
std::optional<AuditResultKind> ParseAuditResultKind(std::string_view text);

struct AuditEntry {
  Uuid id;
  Timestamp time_started = 0;
  // 0 while the saga that carries the request runs: such an entry is not listed yet.
  Timestamp time_completed = 0;
  std::string request_id;
  std::string request_uri;   // path and query, at most 512 characters
  std::string operation_id;  // as Oxide names the endpoint, e.g. "floating_ip_attach"
  std::string source_ip;
  std::optional<std::string> user_agent;  // at most 256 characters
  // Who: the token's silo and the token (our silo user is the token), or nobody (a failed
  // authentication).
  std::optional<Uuid> actor_silo_id;
  std::optional<Uuid> actor_user_id;
  std::optional<std::string> auth_method;  // "access_token" for a bearer token
  std::optional<Uuid> credential_id;
  AuditResultKind result = AuditResultKind::kUnknown;
  int http_status = 0;
  std::optional<std::string> error_code;
  std::string error_message;
  // The saga carrying the request now (while the entry is in progress: a running one keeps it
  // from being taken for cut short), whether its end completes the entry (the request's last
  // saga), and the status the request answers if that saga succeeds.
  std::optional<Uuid> saga_id;
  bool saga_completes = false;
  int success_status = 0;
  // The server (its saga coordinator id) that took the request: its next start completes what
  // it left in progress.
  std::optional<std::string> server_id;
};

// One page of completed entries with `start` <= time_completed < `end`, ordered by
// (time_completed, id), ascending or descending, after the cursor `after`.
struct AuditPageRequest {
  Timestamp start = 0;
  std::optional<Timestamp> end;
  std::optional<std::pair<Timestamp, Uuid>> after;
  bool descending = false;
  int64_t limit = 100;
};

}  // namespace fp::model
