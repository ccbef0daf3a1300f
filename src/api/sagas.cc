// Sagas (fleet admin; floatplane's extension for operators and tests): /v1/system/sagas, the
// sagas by state, newest first, and /v1/system/sagas/{saga_id}, one saga's story. A stuck saga
// shows here until someone repairs it.

#include "api/endpoint.h"
#include "api/pagination.h"

namespace fp::api {

namespace {

Json OptTime(const std::optional<Timestamp>& t) { return t ? Json(FormatRfc3339(*t)) : Json(); }

Json SagaSummaryView(const app::SagaSummary& s) {
  return Json{{"id", s.id.ToString()},
              {"name", s.name},
              {"state", s.state},
              {"time_created", FormatRfc3339(s.time_created)},
              {"time_ended", OptTime(s.time_ended)},
              {"request_id", s.request_id ? Json(*s.request_id) : Json()}};
}

Json ErrorView(const Error& e) {
  return Json{
      {"error_code", e.ErrorCode()},
      {"http_status_code", e.HttpStatus()},
      {"message", e.kind() == ErrorKind::kInternal ? "Internal Server Error" : e.message()}};
}

Json SagaStoryView(const app::SagaStory& s) {
  Json body = SagaSummaryView(s.summary);
  Json nodes = Json::array();
  for (const auto& n : s.nodes) {
    nodes.push_back(Json{{"index", n.index},
                         {"name", n.name},
                         {"action", n.action},
                         {"outcome", n.outcome},
                         {"time_started", OptTime(n.time_started)},
                         {"time_ended", OptTime(n.time_ended)},
                         {"error", n.error ? ErrorView(*n.error) : Json()}});
  }
  body["origin"] = s.origin;
  body["targets"] = s.targets;
  body["params"] = s.params;
  body["nodes"] = std::move(nodes);
  body["error"] = s.error ? ErrorView(*s.error) : Json();
  body["explanation"] = s.explanation;
  return body;
}

}  // namespace

void AddSagaRoutes(Routes& r) {
  r.Add("GET", "/v1/system/sagas", [](const Ctx& c) -> Result<Reply> {
    FP_CHECK_OK(c.app.sagas.MayList(c.actor));
    int64_t limit = FP_TRY(ParseLimit(c.query));
    // The page token carries the filters (scope: "STATE/REQUEST_ID") and the last saga's id
    // (key).
    auto token = FP_TRY(ParsePageToken(c.query));
    std::optional<std::string> state = c.query.Get("state");
    std::optional<std::string> request_id = c.query.Get("request_id");
    if (token) {
      size_t slash = token->scope.find('/');
      auto part = [](std::string text) {
        return text.empty() ? std::nullopt : std::optional<std::string>(std::move(text));
      };
      state = part(token->scope.substr(0, slash));
      request_id = slash == std::string::npos ? std::nullopt : part(token->scope.substr(slash + 1));
    }
    std::optional<Uuid> after;
    if (token) {
      after = Uuid::Parse(token->key);
      if (!after || token->order != "id_descending") {
        return Fail(BadQuery("page_token", "not a page token returned by this server"));
      }
    }
    auto sagas = FP_TRY(c.app.sagas.List(c.actor, state, request_id, after, limit));
    Json items = Json::array();
    for (const auto& s : sagas) items.push_back(SagaSummaryView(s));
    Json next = nullptr;
    if (static_cast<int64_t>(sagas.size()) == limit && !sagas.empty()) {
      next = MakePageToken("id_descending", sagas.back().id.ToString(),
                           state.value_or("") + "/" + request_id.value_or(""));
    }
    return Reply{200, Json{{"items", std::move(items)}, {"next_page", std::move(next)}}};
  });
  r.Add("GET", "/v1/system/sagas/{saga_id}", [](const Ctx& c) -> Result<Reply> {
    FP_CHECK_OK(c.app.sagas.MayList(c.actor));
    return Reply{200,
                 SagaStoryView(FP_TRY(c.app.sagas.View(c.actor, FP_TRY(c.PathUuid("saga_id")))))};
  });
}

}  // namespace fp::api
