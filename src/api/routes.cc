#include "api/routes.h"

#include <chrono>
#include <memory>
#include <string>

#include "api/middleware.h"
#include "api/system.h"

namespace fp::api {

HttpHandler MakeApiHandler(Services services, std::function<HttpServerStats()> http_stats,
                           std::function<void(std::string&)> more_metrics) {
  auto router = std::make_shared<Routes>();
  AddSiloRoutes(*router);
  AddProjectRoutes(*router);
  AddIpPoolRoutes(*router);
  AddFloatingIpRoutes(*router);
  AddTokenRoutes(*router);
  AddInstanceRoutes(*router);
  AddSledRoutes(*router);
  AddSagaRoutes(*router);
  AddExternalIpRoutes(*router);

  auto in_flight = std::make_shared<KeysInFlight>();
  auto metrics = std::make_shared<HttpMetrics>(router->Patterns());
  auto serve = [router, in_flight, services, metrics, http_stats = std::move(http_stats),
                more_metrics = std::move(more_metrics)](const HttpRequest& req,
                                                        std::string& route) -> HttpResponse {
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
      auto secret = BearerSecret(req);
      if (!secret) return ErrorResponse(req, secret.error());
      auto actor = services.tokens.Authenticate(*secret);
      if (!actor) return ErrorResponse(req, actor.error());
      auto query = Query::Parse(req.query);
      if (!query) return ErrorResponse(req, query.error());
      Ctx ctx{req, match->params, *query, *actor, services, nullptr};
      auto run = [&]() -> HttpResponse {
        auto reply = match->target->run(ctx);
        if (!reply) return ErrorResponse(req, reply.error());
        return JsonResponse(reply->status, reply->body);
      };
      std::string key = req.Header("idempotency-key");
      // Mutating requests take a key (product.md difference 13).
      bool mutating = req.method == "POST" || req.method == "PUT" || req.method == "DELETE";
      if (key.empty() || !mutating) return run();
      return WithIdempotencyKey(*match->target, ctx, key, *in_flight, run);
    } catch (const std::exception& e) {
      return ErrorResponse(req, Error::Internal(std::string("unexpected exception: ") + e.what()));
    }
  };
  return [serve = std::move(serve), metrics](const HttpRequest& req) -> HttpResponse {
    auto began = std::chrono::steady_clock::now();
    std::string route = "unmatched";
    HttpResponse answer = serve(req, route);
    metrics->Record(
        req.method, route, answer.status,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
    return answer;
  };
}

}  // namespace fp::api
