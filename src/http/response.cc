// Answering: the handler's request built from Beast's parse, the response serialized by Beast,
// and the error answers the server sends itself.

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/uuid.h"
#include "http/event_server.h"
#include "http/url.h"

namespace fp::http::detail {

namespace {

std::string ErrorBody(std::string_view request_id, std::string_view code, std::string_view msg) {
  nlohmann::json j = {{"request_id", request_id}, {"error_code", code}, {"message", msg}};
  return j.dump();
}

}  // namespace

// A whole error response, for answers the event loop sends itself (before or instead of a
// handler): a fresh request id, "Connection: close", and Retry-After for 503.
std::string ErrorWire(Random& random, int status, std::string_view code, std::string_view message) {
  std::string request_id = random.NewUuid().ToString();
  beast_http::response<beast_http::string_body> res;
  res.result(static_cast<unsigned>(status));
  res.set(beast_http::field::content_type, "application/json");
  res.set("x-request-id", request_id);
  if (status == 503) res.set(beast_http::field::retry_after, "1");
  res.keep_alive(false);
  res.body() = ErrorBody(request_id, code, message);
  res.prepare_payload();
  std::ostringstream wire;
  wire << res;
  return std::move(wire).str();
}

bool EventServer::Answer(Conn& c) {
  auto start = clock_.Monotonic();
  c.answered_any = true;
  std::string request_id = random_.NewUuid().ToString();
  beast_http::response<beast_http::string_body> res;
  bool keep_alive = false;
  bool head = false;
  if (c.parse_error) {
    // The request could not be read as HTTP (over a limit, malformed): answer 400 and close.
    const auto& ec = c.parse_error;
    std::string msg =
        ec == beast_http::error::body_limit
            ? fmt::format("request body exceeds the limit of {} bytes", options_.body_limit)
        : ec == beast_http::error::header_limit
            ? fmt::format("request headers exceed the limit of {} bytes", options_.header_limit)
            : fmt::format("malformed HTTP request: {}", ec.message());
    res.result(400);
    res.set(beast_http::field::content_type, "application/json");
    res.body() = ErrorBody(request_id, "InvalidRequest", msg);
    LogRequest("-", "-", 400, start, request_id);
  } else {
    auto& req = c.parser->get();
    HttpRequest r;
    r.method = std::string(req.method_string());
    RequestTarget target = SplitTarget(req.target());
    r.path = std::string(target.path);
    r.query = std::string(target.query);
    for (const auto& field : req) {
      std::string name(field.name_string());
      for (char& ch : name) {
        ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      }
      r.headers.emplace_back(std::move(name), std::string(field.value()));
    }
    r.body = std::move(req.body());
    r.request_id = request_id;
    r.source_address = c.address;
    r.client_key = c.client;
    r.tls = c.tls != nullptr;
    keep_alive = req.keep_alive();
    res.version(req.version());
    head = r.method == "HEAD";
    HttpResponse out = handler_(r);
    res.result(static_cast<unsigned>(out.status));
    if (!out.body.empty()) res.set(beast_http::field::content_type, out.content_type);
    for (const auto& [k, v] : out.headers) res.set(k, v);
    res.body() = std::move(out.body);
    LogRequest(r.method, r.path, out.status, start, request_id, &r);
  }
  res.set("x-request-id", request_id);
  keep_alive = keep_alive && !stopping_;
  res.keep_alive(keep_alive);
  res.prepare_payload();
  // A 304 or 204 has no body and no Content-Length (RFC 9110, 8.6); the answer to HEAD has the
  // headers a GET would get, and no body (one would be read as the next answer on the
  // connection).
  if (res.result() == beast_http::status::not_modified ||
      res.result() == beast_http::status::no_content) {
    res.erase(beast_http::field::content_length);
  }
  if (head) res.body().clear();
  std::ostringstream wire;
  wire << res;
  bool sent = socket_io::SendAll(clock_, c.stream(), wire.view(),
                                 clock_.Monotonic() + options_.send_timeout);
  return sent && keep_alive;
}

void EventServer::LogRequest(std::string_view method, std::string_view path, int status,
                             TimePoint start, const std::string& request_id,
                             const HttpRequest* request) {
  double latency_ms = std::chrono::duration<double, std::milli>(clock_.Monotonic() - start).count();
  const bool read = method == "GET" || method == "HEAD";
  const bool routine =
      read && status < 400 &&
      (options_.quiet_reads || std::find(options_.quiet_paths.begin(), options_.quiet_paths.end(),
                                         path) != options_.quiet_paths.end());
  const LogLevel level = routine ? LogLevel::kDebug : LogLevel::kInfo;
  if (!LogEnabled(level)) return;
  // Rendered straight into the line (LogFields): every request writes one.
  std::vector<std::string> values;  // the headers' values, which the fields point into
  values.reserve(options_.logged_headers.size());
  std::vector<LogField> fields{{"method", method},
                               {"path", path},
                               {"status", int64_t{status}},
                               {"latency_ms", latency_ms},
                               {"request_id", std::string_view(request_id)}};
  if (request) {
    for (const auto& [header, field] : options_.logged_headers) {
      std::string value = request->Header(header);
      if (value.size() > 128) value.resize(128);  // an id, not a payload
      if (value.empty()) continue;
      values.push_back(std::move(value));
      fields.push_back({field, std::string_view(values.back())});
    }
  }
  LogFields(level, "request", fields);
}

}  // namespace fp::http::detail
