#include "api/routes.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include "api/middleware.h"
#include "api/operations.h"
#include "api/system.h"
#include "common/log.h"

namespace fp::api {

HttpHandler MakeApiHandler(Services services, std::function<HttpServerStats()> http_stats,
                           std::function<void(std::string&)> more_metrics) {
  auto router = std::make_shared<Routes>();
  AddSiloRoutes(*router);
  AddProjectRoutes(*router);
  AddIpPoolRoutes(*router);
  AddFloatingIpRoutes(*router);
  AddTokenRoutes(*router);
  AddUserRoutes(*router);
  AddInstanceRoutes(*router);
  AddSledRoutes(*router);
  AddSagaRoutes(*router);
  AddAuditLogRoutes(*router);
  AddQuotaRoutes(*router);
  AddExternalIpRoutes(*router);

  // Every route names its operation (api/operations.h): what its audit entries record.
  auto operations = std::make_shared<std::map<std::string, std::string>>();
  for (const auto& [method, pattern] : router->Patterns()) {
    auto id = OperationId(method, pattern);
    if (!id) {
      std::fprintf(stderr, "api: route %s %s has no operation id (api/operations.cc)\n",
                   method.c_str(), pattern.c_str());
      std::abort();
    }
    (*operations)[method + " " + pattern] = std::string(*id);
  }

  auto in_flight = std::make_shared<KeysInFlight>();
  auto metrics = std::make_shared<HttpMetrics>(router->Patterns());
  auto serve = [router, in_flight, services, metrics, operations,
                http_stats = std::move(http_stats), more_metrics = std::move(more_metrics)](
                   const HttpRequest& req, std::string& route) -> HttpResponse {
    try {
      if (auto version = CheckApiVersion(req); !version) return ErrorResponse(req, version.error());
      if (req.method == "GET" && (req.path == "/metrics" || req.path == "/v1/ping")) {
        route = req.path;
      }
      if (auto answer = ServeSystem(req, services, http_stats, metrics.get(), more_metrics)) {
        return *answer;
      }
      auto match = router->Find(req.method, req.path);
      if (match) route = *match->pattern;
      if (!match) {
        if (match.error().kind == http::RouteMiss::Kind::kMethodNotAllowed) {
          return JsonResponse(405, Json{{"request_id", req.request_id},
                                        {"error_code", "MethodNotAllowed"},
                                        {"message", "method not allowed"}});
        }
        return ErrorResponse(req, Error(ErrorKind::kNotFound, "Not Found"));
      }
      std::string user_agent = req.Header("user-agent");
      app::RequestFacts facts{
          .request_id = req.request_id,
          .request_uri = req.query.empty() ? req.path : req.path + "?" + req.query,
          .operation_id = operations->at(req.method + " " + *match->pattern),
          .source_ip = req.source_address,
          .user_agent = user_agent.empty() ? std::nullopt : std::optional(user_agent),
          .time_started = services.audit.Now()};
      // An answer that no effect recorded leaves with its audit entry written (a failed
      // authentication, a refusal, a request that changed nothing).
      auto audited = [&](app::RequestRecord& record, HttpResponse answer, bool keep) {
        if (auto s = services.audit.Finish(record, {answer.status, answer.body}, keep); !s) {
          LogEvent("error", "could not write the request's audit entry",
                   {{"request_id", req.request_id}, {"error", s.error().message()}});
        }
        metrics->RecordAudited(answer.status < 400);
        return answer;
      };
      bool mutating = req.method == "POST" || req.method == "PUT" || req.method == "DELETE";
      auto query = Query::Parse(req.query);
      // Logging in and out need no credentials (an entry records each, by no one).
      const bool is_public =
          *match->pattern == "/v1/login/{silo_name}/local" || *match->pattern == "/v1/logout";
      bool by_cookie = false;
      auto actor =
          is_public ? Result<app::Actor>(app::Actor{}) : Authenticate(req, services, by_cookie);
      Status same_origin = Ok();
      if (actor && mutating && (by_cookie || is_public)) {
        same_origin = CheckSameOrigin(req, /*origin_optional=*/is_public);
      }
      if (!actor || !same_origin) {
        auto record = services.audit.Begin(nullptr, facts, std::nullopt);
        return audited(*record, ErrorResponse(req, actor ? same_origin.error() : actor.error()),
                       false);
      }
      Ctx ctx{req, match->params, query ? *query : Query(), *actor, services, nullptr};
      auto run = [&]() -> HttpResponse {
        if (!query) return ErrorResponse(req, query.error());
        auto reply = match->target->run(ctx);
        if (!reply) return ErrorResponse(req, reply.error());
        HttpResponse answer = JsonResponse(reply->status, reply->body);
        for (auto& header : reply->headers) answer.headers.push_back(std::move(header));
        return answer;
      };
      if (!mutating) return run();
      if (is_public) {
        auto record = services.audit.Begin(nullptr, facts, std::nullopt);
        ctx.record = record.get();
        return audited(*record, run(), false);
      }
      // Mutating requests are audited, and take a key (product.md difference 13).
      std::string key = req.Header("idempotency-key");
      std::optional<app::RequestKey> keyed;
      Status key_ok = Ok();
      if (!key.empty()) {
        key_ok = CheckIdempotencyKey(req, key);
        if (key_ok) keyed = app::RequestKey{actor->token_id, key, KeyedRequestHash(req)};
      }
      auto record = services.audit.Begin(&*actor, facts, keyed);
      if (!key_ok) return audited(*record, ErrorResponse(req, key_ok.error()), false);
      ctx.record = record.get();
      if (!keyed) return audited(*record, run(), false);
      auto out =
          WithIdempotencyKey(*match->target, ctx, key, keyed->request_sha256, *in_flight, run);
      return audited(*record, std::move(out.response), out.keep);
    } catch (const std::exception& e) {
      return ErrorResponse(req, Error::Internal(std::string("unexpected exception: ") + e.what()));
    }
  };
  return [serve = std::move(serve), metrics,
          &clock = services.clock](const HttpRequest& req) -> HttpResponse {
    const MonoTime began = clock.Monotonic();
    std::string route = "unmatched";
    HttpResponse answer = serve(req, route);
    metrics->Record(req.method, route, answer.status,
                    std::chrono::duration<double>(clock.Monotonic() - began).count());
    return answer;
  };
}

}  // namespace fp::api
