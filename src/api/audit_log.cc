// The audit log (fleet admin): GET /v1/system/audit-log, Oxide's audit_log_list.

#include <fmt/format.h>

#include <algorithm>

#include "api/endpoint.h"
#include "api/pagination.h"

namespace fp::api {

namespace {

constexpr std::string_view kAscending = "time_and_id_ascending";
constexpr std::string_view kDescending = "time_and_id_descending";

Json AuditEntryView(const model::AuditEntry& e) {
  Json actor = e.actor_user_id ? Json{{"kind", "silo_user"},
                                      {"silo_id", e.actor_silo_id->ToString()},
                                      {"silo_user_id", e.actor_user_id->ToString()}}
                               : Json{{"kind", "unauthenticated"}};
  Json result;
  switch (e.result) {
    case model::AuditResultKind::kSuccess:
      result = Json{{"kind", "success"}, {"http_status_code", e.http_status}};
      break;
    case model::AuditResultKind::kError:
      result = Json{{"kind", "error"},
                    {"http_status_code", e.http_status},
                    {"error_code", e.error_code ? Json(*e.error_code) : Json(nullptr)},
                    {"error_message", e.error_message}};
      break;
    case model::AuditResultKind::kUnknown:
      result = Json{{"kind", "unknown"}};
      break;
  }
  return Json{
      {"id", e.id.ToString()},
      {"time_started", FormatRfc3339(e.time_started)},
      {"time_completed", FormatRfc3339(e.time_completed)},
      {"request_id", e.request_id},
      {"request_uri", e.request_uri},
      {"operation_id", e.operation_id},
      {"source_ip", e.source_ip},
      {"user_agent", e.user_agent ? Json(*e.user_agent) : Json(nullptr)},
      {"actor", std::move(actor)},
      {"auth_method", e.auth_method ? Json(*e.auth_method) : Json(nullptr)},
      {"credential_id", e.credential_id ? Json(e.credential_id->ToString()) : Json(nullptr)},
      {"result", std::move(result)}};
}

Result<Timestamp> TimeParam(const Query& q, const char* name) {
  auto raw = q.Get(name);
  // An offset's "+" written unencoded in a URL arrives as a space.
  if (raw) std::replace(raw->begin(), raw->end(), ' ', '+');
  auto t = raw ? ParseRfc3339(*raw) : std::nullopt;
  if (!t) {
    return Fail(BadQuery(name, raw ? "expected an RFC 3339 date-time, e.g. 2026-12-01T00:00:00Z"
                                   : "required (an RFC 3339 date-time, e.g. "
                                     "2026-12-01T00:00:00Z)"));
  }
  return *t;
}

// The page an audit-log request asks for. The first page's start_time, end_time and sort_by
// travel in its page token, so that later pages need only limit and page_token.
Result<model::AuditPageRequest> ParseAuditPage(const Query& q) {
  model::AuditPageRequest page;
  page.limit = FP_TRY(ParseLimit(q));
  auto token = FP_TRY(ParsePageToken(q));
  if (token) {
    // order: the sort; key: "<time_completed>/<id>" of the last entry; scope: "<start>/<end>".
    Timestamp last = 0, start = 0;
    char id[37] = {};
    long long end = -1;
    bool ok = (token->order == kAscending || token->order == kDescending) &&
              std::sscanf(token->key.c_str(), "%ld/%36s", &last, id) == 2 &&
              std::sscanf(token->scope.c_str(), "%ld/%lld", &start, &end) == 2;
    auto uuid = ok ? Uuid::Parse(id) : std::nullopt;
    if (!uuid) return Fail(BadQuery("page_token", "not a page token returned by this server"));
    page.descending = token->order == kDescending;
    page.start = start;
    if (end >= 0) page.end = end;
    page.after = std::pair(last, *uuid);
    return page;
  }
  page.start = FP_TRY(TimeParam(q, "start_time"));
  if (q.Get("end_time")) page.end = FP_TRY(TimeParam(q, "end_time"));
  std::string order = q.Get("sort_by").value_or(std::string(kAscending));
  if (order != kAscending && order != kDescending) {
    return Fail(
        BadQuery("sort_by", fmt::format("expected \"{}\" or \"{}\"", kAscending, kDescending)));
  }
  page.descending = order == kDescending;
  return page;
}

}  // namespace

void AddAuditLogRoutes(Routes& r) {
  r.Add("GET", "/v1/system/audit-log", [](const Ctx& c) -> Result<Reply> {
    model::AuditPageRequest page = FP_TRY(ParseAuditPage(c.query));
    auto entries = FP_TRY(c.app.audit.List(c.actor, page));
    Json items = Json::array();
    for (const auto& e : entries) items.push_back(AuditEntryView(e));
    Json next = nullptr;
    if (static_cast<int64_t>(entries.size()) == page.limit && !entries.empty()) {
      const auto& last = entries.back();
      next = MakePageToken(page.descending ? kDescending : kAscending,
                           fmt::format("{}/{}", last.time_completed, last.id.ToString()),
                           fmt::format("{}/{}", page.start, page.end.value_or(-1)));
    }
    return Reply{200, Json{{"items", std::move(items)}, {"next_page", std::move(next)}}};
  });
}

}  // namespace fp::api
