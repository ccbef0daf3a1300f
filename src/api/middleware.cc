#include "api/middleware.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <optional>

#include "api/users.h"
#include "common/log.h"

namespace fp::api {

Result<std::string> BearerSecret(const HttpRequest& req) {
  std::string auth = req.Header("authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (auth.empty()) {
    return Fail(
        Error::Unauthenticated("credentials missing: send \"Authorization: Bearer "
                               "<token>\""));
  }
  auto scheme_is_bearer = [&] {
    if (auth.size() <= kBearer.size()) return false;
    for (size_t i = 0; i < kBearer.size(); ++i) {
      if (std::tolower(static_cast<unsigned char>(auth[i])) !=
          std::tolower(static_cast<unsigned char>(kBearer[i]))) {
        return false;
      }
    }
    return true;
  };
  if (!scheme_is_bearer()) {
    return Fail(
        Error::Unauthenticated("credentials invalid: expected \"Authorization: Bearer "
                               "<token>\""));
  }
  return auth.substr(kBearer.size());
}

Result<app::Actor> Authenticate(const HttpRequest& req, const Services& services, bool& by_cookie) {
  by_cookie = false;
  if (req.Header("authorization").empty()) {
    if (auto token = CookieValue(req, kSessionCookie); token && !token->empty()) {
      by_cookie = true;
      return services.users.Authenticate(*token);
    }
    return Fail(Error::Unauthenticated(
        "credentials missing: send \"Authorization: Bearer <token>\", or log in "
        "(POST /v1/login/SILO/local) and send its session cookie"));
  }
  std::string secret = FP_TRY(BearerSecret(req));
  return services.tokens.Authenticate(secret);
}

Status CheckSameOrigin(const HttpRequest& req, bool origin_optional) {
  const std::string origin = req.Header("origin");
  const std::string host = req.Header("host");
  if (!origin.empty()) {
    size_t scheme_end = origin.find("://");
    if (scheme_end != std::string::npos && !host.empty() && origin.substr(scheme_end + 3) == host) {
      return Ok();
    }
  } else {
    const std::string site = req.Header("sec-fetch-site");
    if (site == "same-origin" || (site.empty() && origin_optional)) return Ok();
  }
  return Fail(Error(ErrorKind::kForbidden,
                    fmt::format("cross-site request refused: a request authenticated by the "
                                "session cookie must come from this server's console (Origin "
                                "\"{}\", Host \"{}\")",
                                origin, host)));
}

bool KeysInFlight::Claim(const std::string& id) {
  MutexLock lock(mu_);
  return keys_.insert(id).second;
}

void KeysInFlight::Release(const std::string& id) {
  MutexLock lock(mu_);
  keys_.erase(id);
}

Status CheckIdempotencyKey(const HttpRequest& req, const std::string& key) {
  if (key.size() > 255) {
    return Fail(
        Error::InvalidRequest("header Idempotency-Key: may contain at most 255 characters"));
  }
  if (req.path == "/v1/system/tokens" || req.path == "/v1/login/token") {
    return Fail(Error::InvalidRequest(
        "header Idempotency-Key: not accepted when creating a token or a session, whose secret "
        "is never stored; send the request without it"));
  }
  return Ok();
}

namespace {

HttpResponse Replayed(HttpResponse r) {
  r.headers.emplace_back("idempotent-replayed", "true");
  return r;
}

Error KeyInProgress(const std::string& key) {
  return Error::Unavailable(fmt::format(
      "a request with Idempotency-Key \"{}\" is still in progress; retry when it completes", key));
}

void Keep(const Ctx& c, const std::string& key, const std::string& hash,
          const HttpResponse& answer) {
  if (auto s = c.app.idempotency.Finish(c.actor.token_id, key, hash,
                                        app::KeyAnswer{answer.status, answer.body});
      !s) {
    LogEvent("warn", "could not record an idempotent response", {{"error", s.error().message()}});
  }
}

// The answer a request with `key` gets from the key's record: the stored answer, the answer
// rebuilt from the outcome of the saga that carries it, 503 while that saga runs, 422 for
// another request under the key. std::nullopt if the request is to run: no record, or a saga
// that unwound (its effect undone) with a 5xx error, whose link is then forgotten.
std::optional<HttpResponse> AnswerFromRecord(const Endpoint& endpoint, const Ctx& c,
                                             const std::string& key, const std::string& hash) {
  using Outcome = app::KeyRecall::Outcome;
  auto recall = c.app.idempotency.Recall(c.actor.token_id, key, hash);
  if (!recall) return ErrorResponse(c.req, recall.error());
  // An answer rebuilt from a finished saga is kept as the key's answer: later retries get the
  // same one, even once the saga's history is pruned.
  auto keep = [&](HttpResponse answer) {
    Keep(c, key, hash, answer);
    return Replayed(std::move(answer));
  };
  switch (recall->outcome) {
    case Outcome::kRun:
      return std::nullopt;
    case Outcome::kOtherRequest:
      return ErrorResponse(c.req, Error::Unprocessable(fmt::format(
                                      "Idempotency-Key \"{}\" was already used for a different "
                                      "request; use a new key for a new request",
                                      key)));
    case Outcome::kAnswer: {
      HttpResponse answer;
      answer.status = recall->answer.status;
      answer.body = recall->answer.body;
      return Replayed(std::move(answer));
    }
    case Outcome::kSagaPruned:
      return ErrorResponse(c.req, Error::Unprocessable(fmt::format(
                                      "Idempotency-Key \"{}\" names an operation whose history "
                                      "was pruned; its answer cannot be replayed",
                                      key)));
    case Outcome::kSagaRunning:
      return ErrorResponse(c.req, KeyInProgress(key));
    case Outcome::kSagaDone: {
      if (c.record) c.record->ReplayFromKey();
      if (!endpoint.from_saga) {
        return ErrorResponse(c.req, Error::Internal("no replay for the saga of this request"));
      }
      auto reply = endpoint.from_saga(c, recall->params, recall->output);
      if (!reply) return Replayed(ErrorResponse(c.req, reply.error()));
      return keep(JsonResponse(reply->status, reply->body));
    }
    case Outcome::kSagaFailed:
      if (recall->error.HttpStatus() >= 500) {
        return Replayed(ErrorResponse(c.req, recall->error));  // stuck
      }
      return keep(ErrorResponse(c.req, recall->error));
  }
  return ErrorResponse(c.req, Error::Internal("unknown idempotency outcome"));
}

}  // namespace

std::string KeyedRequestHash(const HttpRequest& req) {
  return app::Idempotency::RequestHash(req.method + "\n" + req.path + "\n" + req.query + "\n" +
                                       req.body);
}

KeyedResponse WithIdempotencyKey(const Endpoint& endpoint, const Ctx& ctx, const std::string& key,
                                 const std::string& hash, KeysInFlight& in_flight,
                                 const std::function<HttpResponse()>& run) {
  const HttpRequest& req = ctx.req;
  const std::string flight = ctx.actor.token_id.ToString() + "\n" + key;
  if (!in_flight.Claim(flight)) return {ErrorResponse(req, KeyInProgress(key))};
  struct Release {
    KeysInFlight& keys;
    const std::string& id;
    ~Release() { keys.Release(id); }
  } release{in_flight, flight};

  if (auto answer = AnswerFromRecord(endpoint, ctx, key, hash)) return {*answer};
  HttpResponse response = run();
  using Outcome = app::RequestRecord::Outcome;
  Outcome outcome = ctx.record->outcome();
  if (outcome == Outcome::kTaken) {
    // Another server on this database ran the request first; this one's effect rolled back.
    if (auto answer = AnswerFromRecord(endpoint, ctx, key, hash)) return {*answer};
    return {ErrorResponse(req, KeyInProgress(key))};
  }
  // A 5xx is not remembered: a retry does the work again, or finds the effect's record.
  if (response.status >= 500) return {response};
  app::KeyAnswer recorded = ctx.record->answer();
  if (outcome == Outcome::kAnswered && recorded.status == response.status &&
      recorded.body == response.body) {
    return {response};  // committed with the effect
  }
  return {response, /*keep=*/true};
}

namespace {

// "A.B.C" as three numbers; none when it is not that.
std::optional<std::array<uint64_t, 3>> ParseVersion(std::string_view text) {
  std::array<uint64_t, 3> parts{};
  for (size_t i = 0; i < 3; ++i) {
    size_t end = i < 2 ? text.find('.') : text.size();
    if (end == std::string_view::npos || end == 0 || end > 19) return std::nullopt;
    for (char c : text.substr(0, end)) {
      if (c < '0' || c > '9') return std::nullopt;
      parts[i] = parts[i] * 10 + static_cast<uint64_t>(c - '0');
    }
    text.remove_prefix(i < 2 ? end + 1 : end);
  }
  return parts;
}

}  // namespace

Status CheckApiVersion(const HttpRequest& req) {
  std::string asked = req.Header("api-version");
  if (asked.empty()) return Ok();
  auto version = ParseVersion(asked);
  if (!version) {
    return Fail(Error::InvalidRequest(fmt::format(
        "header api-version: \"{}\" is not a version such as {}", asked, kServedApiVersion)));
  }
  if (*version > *ParseVersion(kServedApiVersion)) {
    return Fail(Error::InvalidRequest(fmt::format(
        "header api-version: {} is newer than the API version this server speaks, {}; use a "
        "client for {} or older",
        asked, kServedApiVersion, kServedApiVersion)));
  }
  return Ok();
}

}  // namespace fp::api
