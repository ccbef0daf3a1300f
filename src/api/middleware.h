#pragma once

// What runs around every authenticated route: bearer-token authentication and idempotency
// keys. (The request id is assigned by the HTTP server; every error body echoes it, see
// ErrorResponse.)

#include <functional>
#include <set>
#include <string>

#include "api/endpoint.h"
#include "common/mutex.h"

namespace fp::api {

// The secret of `Authorization: Bearer <secret>` (scheme case-insensitive). Unauthenticated
// (401) "credentials missing: ..." without the header, "credentials invalid: ..." with another
// scheme or an empty secret.
Result<std::string> BearerSecret(const HttpRequest& req);

// Who makes the request: the bearer token's actor when an Authorization header is sent, else
// the console session's of the session cookie (`by_cookie` set), else Unauthenticated naming
// both ways.
Result<app::Actor> Authenticate(const HttpRequest& req, const Services& services, bool& by_cookie);

// Whether a request that a browser sends by itself (the session cookie rides along with any
// request to this server, a cross-site form's included) comes from a page of this server: its
// Origin names this server (the Host it was sent to), or, without an Origin, its
// Sec-Fetch-Site says same-origin. Forbidden otherwise: no cross-site request forgery. With
// `origin_optional`, a request that says neither passes (a login from a program: no cookie is
// involved).
Status CheckSameOrigin(const HttpRequest& req, bool origin_optional);

// The (token, Idempotency-Key) pairs of requests running in this process. "In progress" is
// kept here only, never in the datastore (app/idempotency.h): a server that dies leaves no
// claim behind. Thread-safe.
class KeysInFlight {
 public:
  // False if a request with this (token, key) is running.
  bool Claim(const std::string& id);
  void Release(const std::string& id);

 private:
  Mutex mu_;
  std::set<std::string> keys_ FP_GUARDED_BY(mu_);
};

// Whether a request may carry `key`: InvalidRequest for a key over 255 characters, and for
// creating a token (its answer is the token's secret, shown once: a replay would need it
// stored in the clear).
Status CheckIdempotencyKey(const HttpRequest& req, const std::string& key);

// The hash a request is recognised by under its Idempotency-Key: method, path, query and body.
std::string KeyedRequestHash(const HttpRequest& req);

// A keyed request's answer, and whether it is to be stored under the key (by
// app::Audit::Finish, with the request's audit entry): not when its effect's commit stored it
// already, not for a replayed answer, never for a 5xx.
struct KeyedResponse {
  HttpResponse response;
  bool keep = false;
};

// Runs a request with an Idempotency-Key at most once per (token, key): a retry with the same
// request gets the first answer again (header idempotent-replayed: true), also after a crash
// at any instant (app/idempotency.h); a request under a key whose request is still running gets
// 503 with Retry-After; another request under the same key gets 422. `run` runs the route;
// `ctx.record` is the request's record, made with the key and `hash` (KeyedRequestHash).
KeyedResponse WithIdempotencyKey(const Endpoint& endpoint, const Ctx& ctx, const std::string& key,
                                 const std::string& hash, KeysInFlight& in_flight,
                                 const std::function<HttpResponse()>& run);

// The API version this server speaks (the OpenAPI subset's), and the check of a request's
// `api-version` header (../shared/spec/cli-and-console.md SRV-12): absent, equal or older is
// served (the Oxide SDK sends its own, older version); newer, or not a version, is a 400 that
// names the served version.
inline constexpr std::string_view kServedApiVersion = "2026081901.0.0";
Status CheckApiVersion(const HttpRequest& req);

}  // namespace fp::api
