#pragma once

// What the API's route files are written with: a request's context, its reply, and the
// endpoint a route maps to. Each resource's file registers its routes with an Add...Routes
// function declared here.

#include <functional>
#include <string>
#include <type_traits>

#include "api/json_input.h"
#include "app/audit.h"
#include "app/floating_ips.h"
#include "app/idempotency.h"
#include "app/instances.h"
#include "app/ip_pools.h"
#include "app/projects.h"
#include "app/request.h"
#include "app/saga_list.h"
#include "app/silos.h"
#include "app/sleds.h"
#include "app/store_stats.h"
#include "app/tokens.h"
#include "app/users.h"
#include "common/clock.h"
#include "http/router.h"
#include "http/server.h"

namespace fp::api {

using http::HttpHandler;
using http::HttpRequest;
using http::HttpResponse;
using http::HttpServerStats;
using http::PathParams;

// The application services the API calls; not owned, each outlives the handler.
struct Services {
  app::Silos& silos;
  app::Projects& projects;
  app::IpPools& ip_pools;
  app::FloatingIps& floating_ips;
  app::Tokens& tokens;
  app::Users& users;
  app::Instances* instances;  // null without sled agents: instance endpoints answer 503
  app::Sleds* sleds;          // null without sled agents: sled endpoints answer 503
  app::Idempotency& idempotency;
  app::Audit& audit;
  app::SagaList& sagas;
  app::StoreStats& store_stats;
  const Clock& clock;  // the datastore's: how long requests take, for the metrics
};

// A JSON response; a null body is sent empty.
HttpResponse JsonResponse(int status, const Json& body);

// A successful reply: status and JSON body (null body for 204), and headers of its own
// (Set-Cookie).
struct Reply {
  int status = 200;
  Json body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// One authenticated request as its route sees it.
struct Ctx {
  const HttpRequest& req;
  const PathParams& params;
  const Query& query;
  const app::Actor& actor;
  const Services& app;
  // A mutating request's record: what the commit of its effect records (its audit entry, and
  // its Idempotency-Key's answer). Null for reads.
  app::RequestRecord* record = nullptr;

  // The request, for a service method whose effect is one write of a `T`: that write's commit
  // records the answer (status, view(result)) with the effect.
  // A saga that carries it instead records `status` as its success in the audit entry.
  template <typename T>
  app::Request<T> Effect(int status, Json (*view)(const T&)) const {
    if (record) record->AnswerSagaWith(status);
    return app::Request<T>{{actor, EffectOf()}, [status, view](const T& result) {
                             HttpResponse r = JsonResponse(status, view(result));
                             return app::KeyAnswer{r.status, std::move(r.body)};
                           }};
  }
  // The request, for a method whose effect is a write that returns nothing (answered 204).
  app::RequestContext NoContent() const { return app::RequestContext{actor, EffectOf()}; }
  // The request, for a method whose effect a saga carries: the saga's success is answered
  // `status`, which the saga's end records in the audit entry.
  app::RequestContext Saga(int status) const;

  // ServiceUnavailable when the server runs without sled agents.
  Result<app::Instances*> Compute() const;
  Result<app::Sleds*> Hardware() const;
  // InvalidRequest naming the parameter when the path segment is not a name or id.
  Result<NameOrId> PathNameOrId(const std::string& name) const;
  // InvalidRequest naming the parameter when the path segment is not a UUID.
  Result<Uuid> PathUuid(const std::string& name) const;
  // The body as a JSON object (json_input.h's ParseBodyObject).
  Result<Json> Body(bool allow_empty = false) const;

 private:
  db::RequestEffect* EffectOf() const { return record ? record->effect() : nullptr; }
};

using Handler = std::function<Result<Reply>(const Ctx&)>;
// Rebuilds the answer of a request carried by a saga from the saga's parameters and the output
// of its last node, for a retry with the request's Idempotency-Key (app/idempotency.h).
using SagaReplay = std::function<Result<Reply>(const Ctx&, const Json& params, const Json& output)>;

// What routes are written as: lambdas from a request's context to its reply.
template <typename F>
concept HandlerLike = (std::is_invocable_r_v<Result<Reply>, F, const Ctx&>);

struct Endpoint {
  template <HandlerLike F>
  Endpoint(F handler) : run(std::move(handler)) {}  // NOLINT: implicit: routes are lambdas
  Endpoint(Handler handler, SagaReplay replay)
      : run(std::move(handler)), from_saga(std::move(replay)) {}

  Handler run;
  SagaReplay from_saga;  // set for endpoints whose effect a saga carries
};

using Routes = http::Router<Endpoint>;

// The Oxide error body {request_id, error_code, message} with the error's status; an internal
// error's detail is logged and replaced by "Internal Server Error"; 503 carries Retry-After.
HttpResponse ErrorResponse(const HttpRequest& req, const Error& e);

// The replay of a 204 request carried by a saga.
Result<Reply> NoContentFromSaga(const Ctx&, const Json&, const Json&);

// Each resource's routes (silos.cc, projects.cc, ...).
void AddSiloRoutes(Routes& r);
void AddProjectRoutes(Routes& r);
void AddIpPoolRoutes(Routes& r);
void AddFloatingIpRoutes(Routes& r);
void AddInstanceRoutes(Routes& r);
void AddExternalIpRoutes(Routes& r);
void AddSledRoutes(Routes& r);
void AddTokenRoutes(Routes& r);
void AddUserRoutes(Routes& r);
void AddSagaRoutes(Routes& r);
void AddAuditLogRoutes(Routes& r);
void AddQuotaRoutes(Routes& r);

}  // namespace fp::api
