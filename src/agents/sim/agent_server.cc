#include "agents/sim/agent_server.h"

#include <fmt/format.h>

#include <algorithm>

#include "api/log.h"
#include "common/url_path.h"

namespace fp::agents::sim {

using Json = nlohmann::json;

namespace {

// Calls held by a hang occupy a worker thread each; the control endpoints need one free
// worker to release them, so there are more workers than the tests ever hold calls.
// Large enough for a full NAT table (100,000 entries is about 15 MB of JSON).
constexpr size_t kBodyLimit = 64 << 20;

api::HttpResponse ErrorAnswer(const Error& error, const std::string& request_id) {
  api::HttpResponse response;
  response.status = error.HttpStatus();
  response.body = Json{{"request_id", request_id},
                       {"error_code", error.ErrorCode()},
                       {"message", error.message()}}
                      .dump(-1, ' ', false, Json::error_handler_t::replace);
  if (error.kind() == ErrorKind::kServiceUnavailable) {
    response.headers.emplace_back("retry-after", std::to_string(error.retry_after_seconds()));
  }
  return response;
}

api::HttpResponse Answer(const Result<Json>& result, const std::string& request_id) {
  if (!result) return ErrorAnswer(result.error(), request_id);
  api::HttpResponse response;
  if (result->is_null()) {
    response.status = 204;
  } else {
    // Messages can quote request text; never let invalid UTF-8 throw here.
    response.body = result->dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  return response;
}

std::vector<std::string> Segments(std::string_view path) {
  std::vector<std::string> out;
  for (std::string_view segment : PathSegments(path)) out.emplace_back(segment);
  return out;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decodes a path segment; InvalidRequest for a malformed escape.
Result<std::string> DecodeSegment(std::string_view raw) {
  std::string out;
  out.reserve(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '%') {
      out.push_back(raw[i]);
      continue;
    }
    int high = i + 2 < raw.size() ? HexDigit(raw[i + 1]) : -1;
    int low = i + 2 < raw.size() ? HexDigit(raw[i + 2]) : -1;
    if (high < 0 || low < 0) {
      return Fail(Error::InvalidRequest(
          fmt::format("malformed percent-encoding in \"{}\"", std::string(raw))));
    }
    out.push_back(static_cast<char>(high * 16 + low));
    i += 2;
  }
  return out;
}

}  // namespace

void EndpointRoutes::Add(std::string method, std::string_view pattern, EndpointHandler handler) {
  routes_.push_back(Route{std::move(method), Segments(pattern), std::move(handler)});
}

Result<EndpointRoutes::Match> EndpointRoutes::Find(std::string_view method,
                                                   std::string_view path) const {
  std::vector<std::string> actual = Segments(path);
  bool path_matched = false;
  for (const Route& route : routes_) {
    if (route.segments.size() != actual.size()) continue;
    PathParams params;
    bool matched = true;
    for (size_t i = 0; matched && i < actual.size(); ++i) {
      const std::string& p = route.segments[i];
      if (p.size() > 2 && p.front() == '{' && p.back() == '}') {
        params[p.substr(1, p.size() - 2)] = FP_TRY(DecodeSegment(actual[i]));
      } else {
        matched = p == actual[i];
      }
    }
    if (!matched) continue;
    path_matched = true;
    if (route.method == method) return Match{&route.handler, std::move(params)};
  }
  if (path_matched) return Fail(Error::InvalidRequest("method not allowed"));
  return Fail(Error::NotFound(fmt::format("no endpoint {}", path)));
}

Result<Json> ParseBody(const api::HttpRequest& request) {
  Json body = Json::parse(request.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    return Fail(Error::InvalidRequest("the request body is not valid JSON"));
  }
  if (!body.is_object()) return Fail(Error::InvalidRequest("expected a JSON object"));
  return body;
}

AgentServer::AgentServer(std::string host, std::string agent, EndpointRoutes routes,
                         std::function<void()> reset)
    : host_(std::move(host)),
      agent_(std::move(agent)),
      routes_(std::move(routes)),
      reset_(std::move(reset)) {}

AgentServer::~AgentServer() { Stop(); }

Result<std::unique_ptr<AgentServer>> AgentServer::Start(const SimOptions& options,
                                                        std::string agent, EndpointRoutes routes,
                                                        std::function<void()> reset) {
  std::unique_ptr<AgentServer> server(
      new AgentServer(options.host, std::move(agent), std::move(routes), std::move(reset)));
  api::HttpServerOptions http;
  http.host = options.host;
  http.port = options.port;
  http.body_limit = kBodyLimit;
  AgentServer* self = server.get();
  server->server_ = FP_TRY(api::HttpServer::Start(
      http, [self](const api::HttpRequest& request) { return self->Handle(request); }));
  server->port_ = server->server_->port();
  return server;
}

uint16_t AgentServer::port() const { return port_; }

std::string AgentServer::base_url() const {
  std::string host = host_.find(':') != std::string::npos ? "[" + host_ + "]" : host_;
  return fmt::format("http://{}:{}", host, port());
}

void AgentServer::Stop() {
  // Release held calls first: the HTTP server waits for calls in progress.
  faults_.Shutdown();
  if (!server_) return;
  server_->Stop();
  // Destroying the server closes its listening socket for certain, so that a stopped agent
  // refuses connections rather than accepting calls it never answers.
  server_.reset();
}

api::HttpResponse AgentServer::Handle(const api::HttpRequest& request) {
  if (request.path == "/faults" || request.path == "/reset") {
    return Answer(HandleControl(request), request.request_id);
  }
  auto route = routes_.Find(request.method, request.path);
  if (!route) return ErrorAnswer(route.error(), request.request_id);

  FaultDecision decision = faults_.Admit(request.method, request.path);
  if (decision.verdict == FaultVerdict::kRefuse) {
    return ErrorAnswer(Error::Unavailable(fmt::format("{}: {}", agent_, decision.reason)),
                       request.request_id);
  }
  Result<Json> result = (*route->handler)(request, route->params);
  if (decision.verdict == FaultVerdict::kHandleThenRefuse) {
    return ErrorAnswer(Error::Unavailable(fmt::format("{}: {}", agent_, decision.reason)),
                       request.request_id);
  }
  if (!result && result.error().kind() == ErrorKind::kInternal) {
    api::LogEvent("error", "agent call failed",
                  {{"agent", agent_}, {"error", result.error().message()}});
  }
  return Answer(result, request.request_id);
}

Result<Json> AgentServer::HandleControl(const api::HttpRequest& request) {
  if (request.path == "/reset") {
    if (request.method != "POST") return Fail(Error::InvalidRequest("method not allowed"));
    reset_();
    api::LogEvent("info", "agent state reset", {{"agent", agent_}});
    return Json{{"reset", true}};
  }
  if (request.method == "GET") return faults_.ToJson();
  if (request.method == "DELETE") {
    faults_.Clear();
    return faults_.ToJson();
  }
  if (request.method == "POST") {
    Json body = FP_TRY(ParseBody(request));
    FaultRule rule = FP_TRY(FaultRule::FromJson(body));
    api::LogEvent("info", "fault added", {{"agent", agent_}, {"fault", rule.ToJson()}});
    faults_.Add(std::move(rule));
    return faults_.ToJson();
  }
  return Fail(Error::InvalidRequest("method not allowed"));
}

}  // namespace fp::agents::sim
