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

std::string_view WithoutSpacesAround(std::string_view v) {
  auto space = [](char c) { return c == ' ' || c == '\t'; };
  while (!v.empty() && space(v.front())) v.remove_prefix(1);
  while (!v.empty() && space(v.back())) v.remove_suffix(1);
  return v;
}

bool Bodiless(int status) { return status == 204 || status == 304; }

}  // namespace

std::optional<std::string> DirectResponseWire(unsigned version, int status,
                                              std::span<const WireField> set_in_order,
                                              std::string_view body, bool keep_alive, bool head) {
  if ((version != 10 && version != 11) || status < 200 || status > 999) return std::nullopt;
  std::vector<WireField> kept;
  kept.reserve(set_in_order.size());
  size_t field_bytes = 0;
  for (const WireField& f : set_in_order) {
    for (std::string_view merged : {"Connection", "Content-Length", "Transfer-Encoding"}) {
      if (beast::iequals(f.name, merged)) return std::nullopt;
    }
    std::erase_if(kept, [&](const WireField& k) { return beast::iequals(k.name, f.name); });
    kept.push_back({f.name, WithoutSpacesAround(f.value)});
  }
  for (const WireField& f : kept) field_bytes += f.name.size() + f.value.size() + 4;
  const bool bodiless = Bodiless(status);
  const beast::string_view reason =
      beast_http::obsolete_reason(static_cast<beast_http::status>(status));
  std::string out;
  out.reserve(64 + field_bytes + (head || bodiless ? 0 : body.size()));
  out += version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ";
  fmt::format_to(std::back_inserter(out), "{} ", status);
  out.append(reason.data(), reason.size());
  out += "\r\n";
  for (const WireField& f : kept) {
    out += f.name;
    out += ": ";
    out += f.value;
    out += "\r\n";
  }
  // What keep_alive() adds when there is no Connection field before it.
  if (version == 11 && !keep_alive) out += "Connection: close\r\n";
  if (version == 10 && keep_alive) out += "Connection: keep-alive\r\n";
  if (!bodiless) fmt::format_to(std::back_inserter(out), "Content-Length: {}\r\n", body.size());
  out += "\r\n";
  if (!head && !bodiless) out += body;
  return out;
}

std::string BeastResponseWire(unsigned version, int status, std::span<const WireField> set_in_order,
                              std::string_view body, bool keep_alive, bool head) {
  beast_http::response<beast_http::string_body> res;
  res.version(version);
  res.result(static_cast<unsigned>(status));
  for (const WireField& f : set_in_order) res.set(f.name, f.value);
  res.keep_alive(keep_alive);
  // A 304 or 204 has no body and no Content-Length (RFC 9110, 8.6).
  const bool bodiless = Bodiless(status);
  if (!bodiless) res.body() = std::string(body);
  res.prepare_payload();
  if (bodiless) res.erase(beast_http::field::content_length);
  // The answer to HEAD has the headers a GET would get, and no body (one would be read as the
  // next answer on the connection).
  if (head) res.body().clear();
  std::ostringstream wire;
  wire << res;
  return std::move(wire).str();
}

std::string ResponseWire(unsigned version, int status, std::span<const WireField> set_in_order,
                         std::string_view body, bool keep_alive, bool head) {
  if (auto direct = DirectResponseWire(version, status, set_in_order, body, keep_alive, head)) {
    return std::move(*direct);
  }
  return BeastResponseWire(version, status, set_in_order, body, keep_alive, head);
}

// A whole error response, for answers the event loop sends itself (before or instead of a
// handler): a fresh request id, "Connection: close", and Retry-After for 503.
std::string ErrorWire(Random& random, int status, std::string_view code, std::string_view message) {
  std::string request_id = random.NewUuid().ToString();
  std::vector<WireField> fields{{"Content-Type", "application/json"}, {"x-request-id", request_id}};
  if (status == 503) fields.push_back({"Retry-After", "1"});
  return ResponseWire(11, status, fields, ErrorBody(request_id, code, message),
                      /*keep_alive=*/false, /*head=*/false);
}

bool EventServer::Answer(Conn& c) {
  auto start = clock_.Monotonic();
  c.answered_any = true;
  std::string request_id = random_.NewUuid().ToString();
  std::vector<WireField> fields;
  std::string wire;
  bool keep_alive = false;
  if (c.parse_error) {
    // The request could not be read as HTTP (over a limit, malformed): answer 400 and close.
    const auto& ec = c.parse_error;
    std::string msg =
        ec == beast_http::error::body_limit
            ? fmt::format("request body exceeds the limit of {} bytes", options_.body_limit)
        : ec == beast_http::error::header_limit
            ? fmt::format("request headers exceed the limit of {} bytes", options_.header_limit)
            : fmt::format("malformed HTTP request: {}", ec.message());
    fields = {{"Content-Type", "application/json"}, {"x-request-id", request_id}};
    wire = ResponseWire(11, 400, fields, ErrorBody(request_id, "InvalidRequest", msg),
                        /*keep_alive=*/false, /*head=*/false);
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
    HttpResponse out = handler_(r);
    // After the handler: a server that began to stop meanwhile answers "Connection: close".
    keep_alive = req.keep_alive() && !stopping_;
    fields.reserve(out.headers.size() + 2);
    if (!out.body.empty()) fields.push_back({"Content-Type", out.content_type});
    for (const auto& [k, v] : out.headers) fields.push_back({k, v});
    fields.push_back({"x-request-id", request_id});
    wire = ResponseWire(req.version(), out.status, fields, out.body, keep_alive,
                        /*head=*/r.method == "HEAD");
    LogRequest(r.method, r.path, out.status, start, request_id, &r);
  }
  bool sent =
      socket_io::SendAll(clock_, c.stream(), wire, clock_.Monotonic() + options_.send_timeout);
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
