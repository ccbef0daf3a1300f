#pragma once

// The floatplane (Oxide) API as the command-line client uses it: authentication, the
// api-version header, idempotency keys on mutations, errors decoded into one line, retries,
// and lists followed across pages.

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli/failure.h"
#include "cli/transport.h"
#include "common/clock.h"
#include "common/random.h"

namespace fp::cli {

// The API version the client speaks (the subset's), sent as `api-version` on every request.
inline constexpr const char* kApiVersion = "2026081901.0.0";

using Query = std::vector<std::pair<std::string, std::string>>;

struct ApiOptions {
  std::string token;
  // Sent with every mutating request; the client's own retries reuse it.
  std::string idempotency_key;
  // When set, a 503 with Retry-After is retried (with the same key) until this deadline;
  // otherwise it is the command's error.
  std::optional<MonoTime> retry_until;
  // Called before each such retry with the server's message (progress on stderr).
  std::function<void(const std::string&)> on_retry;
};

class Api {
 public:
  // `clock` and `random` (retry waits and their jitter) must outlive it.
  Api(Transport& transport, ApiOptions options, const Clock& clock, Random& random)
      : transport_(transport), options_(std::move(options)), clock_(clock), random_(random) {}

  // GET; the answer's JSON. A 429 or 5xx is retried up to 3 times with backoff.
  CliResult<nlohmann::json> Get(const std::string& path, const Query& query = {});
  // POST/PUT/DELETE with `body` (null: none); the answer's JSON (null for 204).
  // With `with_key` false no Idempotency-Key is sent (the server refuses one on token create,
  // whose secret it must not keep for a replay).
  CliResult<nlohmann::json> Mutate(const std::string& method, const std::string& path,
                                   const nlohmann::json& body = nullptr, const Query& query = {},
                                   bool with_key = true);
  // Every item of a paginated list, `on_item` called as they come; at most `limit` items
  // (0: all). Pages are asked for in `page_size`s.
  CliStatus List(const std::string& path, Query query, int64_t limit,
                 const std::function<void(const nlohmann::json&)>& on_item);
  // One request as given (the `api` command): any status is an answer. Only the
  // authorization and api-version headers are added.
  CliResult<HttpReply> Raw(const std::string& method, const std::string& target,
                           const std::string& body,
                           std::vector<std::pair<std::string, std::string>> headers);

  const std::string& idempotency_key() const { return options_.idempotency_key; }

 private:
  CliResult<HttpReply> Send(const std::string& method, const std::string& target,
                            const std::string& body, bool mutating, bool with_key = true);

  Transport& transport_;
  ApiOptions options_;
  const Clock& clock_;
  Random& random_;
};

// `value` with its %XX escapes decoded.
std::string PercentDecode(const std::string& value);
// JSON text of `value`; bytes that are not UTF-8 are replaced, never an exception.
std::string Dump(const nlohmann::json& value, int indent = -1);
// "path?k=v&..." with the values percent-encoded.
std::string WithQuery(const std::string& path, const Query& query);
// One path segment percent-encoded (names, ids).
std::string Segment(const std::string& value);
// The one line an error answer becomes: `<message> (<status> <error_code>, request id <id>)`.
std::string DescribeErrorAnswer(const HttpReply& reply);

}  // namespace fp::cli
