#include "api/endpoint.h"

#include <fmt/format.h>

#include "common/log.h"

namespace fp::api {

Result<app::Instances*> Ctx::Compute() const {
  if (!app.instances) return Fail(Error::Unavailable("this server runs without sled agents"));
  return app.instances;
}

Result<app::Sleds*> Ctx::Hardware() const {
  if (!app.sleds) return Fail(Error::Unavailable("this server runs without sled agents"));
  return app.sleds;
}

Result<NameOrId> Ctx::PathNameOrId(const std::string& name) const {
  auto it = params.find(name);
  std::string raw = it == params.end() ? std::string() : it->second;
  auto v = NameOrId::Parse(raw);
  if (!v) {
    return Fail(Error::InvalidRequest(
        fmt::format("bad path parameter \"{}\": {}", name, v.error().message())));
  }
  return *v;
}

Result<Uuid> Ctx::PathUuid(const std::string& name) const {
  auto it = params.find(name);
  auto v = Uuid::Parse(it == params.end() ? std::string() : it->second);
  if (!v) {
    return Fail(
        Error::InvalidRequest(fmt::format("bad path parameter \"{}\": expected a UUID", name)));
  }
  return *v;
}

Result<Json> Ctx::Body(bool allow_empty) const { return ParseBodyObject(req.body, allow_empty); }

HttpResponse JsonResponse(int status, const Json& body) {
  HttpResponse r;
  r.status = status;
  if (!body.is_null()) r.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  return r;
}

HttpResponse ErrorResponse(const HttpRequest& req, const Error& e) {
  std::string message = e.message();
  if (e.kind() == ErrorKind::kInternal) {
    LogEvent("error", "internal error", {{"request_id", req.request_id}, {"detail", message}});
    message = "Internal Server Error";
  }
  HttpResponse r = JsonResponse(
      e.HttpStatus(),
      Json{{"request_id", req.request_id}, {"error_code", e.ErrorCode()}, {"message", message}});
  if (e.kind() == ErrorKind::kServiceUnavailable || e.kind() == ErrorKind::kTooManyRequests) {
    r.headers.emplace_back("retry-after", std::to_string(std::max(1, e.retry_after_seconds())));
  }
  return r;
}

app::RequestContext Ctx::Saga(int status) const {
  if (record) record->AnswerSagaWith(status);
  return app::RequestContext{actor, EffectOf()};
}

Result<Reply> NoContentFromSaga(const Ctx&, const Json&, const Json&) {
  return Reply{204, nullptr};
}

}  // namespace fp::api
