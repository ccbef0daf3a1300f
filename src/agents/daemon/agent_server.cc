#include "agents/daemon/agent_server.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "agents/agents.h"
#include "common/log.h"
#include "http/host_port.h"

namespace fp::agents::daemon {

using Json = nlohmann::json;

namespace {

// Calls held by a hang occupy a worker thread each; the control endpoints need one free
// worker to release them, so there are more workers than the tests ever hold calls.
// Large enough for a full NAT table (100,000 entries is about 15 MB of JSON).
constexpr size_t kBodyLimit = 64 << 20;

http::HttpResponse ErrorAnswer(const Error& error, const std::string& request_id) {
  http::HttpResponse response;
  response.status = error.HttpStatus();
  response.body =
      AgentError{request_id, std::string(error.ErrorCode()), error.message()}.ToJson().dump(
          -1, ' ', false, Json::error_handler_t::replace);
  if (error.kind() == ErrorKind::kServiceUnavailable) {
    response.headers.emplace_back("retry-after", std::to_string(error.retry_after_seconds()));
  }
  return response;
}

http::HttpResponse Answer(const Result<Json>& result, const std::string& request_id) {
  if (!result) return ErrorAnswer(result.error(), request_id);
  http::HttpResponse response;
  if (result->is_null()) {
    response.status = 204;
  } else {
    // Messages can quote request text; never let invalid UTF-8 throw here.
    response.body = result->dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  return response;
}

// The error a route miss is answered with.
Error RouteError(const http::RouteMiss& miss, std::string_view path) {
  switch (miss.kind) {
    case http::RouteMiss::Kind::kMethodNotAllowed:
      return Error::InvalidRequest("method not allowed");
    case http::RouteMiss::Kind::kMalformedSegment:
      return Error::InvalidRequest(
          fmt::format("malformed percent-encoding in \"{}\"", miss.segment));
    case http::RouteMiss::Kind::kNotFound:
      break;
  }
  return Error::NotFound(fmt::format("no endpoint {}", path));
}

// Whom the control plane made a call for (agents::CallContext), as log fields.
std::vector<std::pair<std::string, std::string>> CallerFields() {
  return {{kRequestIdHeader, "caller_request_id"}, {kSagaIdHeader, "saga_id"}};
}

}  // namespace

Result<Json> ParseBody(const http::HttpRequest& request) {
  Json body = Json::parse(request.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    return Fail(Error::InvalidRequest("the request body is not valid JSON"));
  }
  if (!body.is_object()) return Fail(Error::InvalidRequest("expected a JSON object"));
  return body;
}

Result<int64_t> QueryInt(const std::map<std::string, std::string, std::less<>>& query,
                         std::string_view name, int64_t min, int64_t max, int64_t absent) {
  auto it = query.find(name);
  if (it == query.end()) return absent;
  const std::string& text = it->second;
  int64_t n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < min || n > max) {
    return Fail(Error::InvalidRequest(
        fmt::format("query parameter \"{}\": expected an integer from {} to {}", name, min, max)));
  }
  return n;
}

AgentServer::AgentServer(std::string host, std::string agent, EndpointRoutes routes,
                         std::function<void()> reset, FaultInjector& faults)
    : host_(std::move(host)),
      agent_(std::move(agent)),
      routes_(std::move(routes)),
      reset_(std::move(reset)),
      faults_(faults) {}

AgentServer::~AgentServer() { Stop(); }

Result<std::unique_ptr<AgentServer>> AgentServer::Start(const DaemonOptions& options,
                                                        std::string agent, EndpointRoutes routes,
                                                        std::function<void()> reset,
                                                        FaultInjector& faults) {
  std::unique_ptr<AgentServer> server(
      new AgentServer(options.host, std::move(agent), std::move(routes), std::move(reset), faults));
  server->test_faults_ = options.test_faults;
  server->secret_ = options.secret;
  http::HttpServerOptions http;
  http.thread_name = server->agent_.substr(0, server->agent_.find(' '));  // "sled", "switch"
  http.host = options.host;
  http.port = options.port;
  // The HTTP front's timeouts stay on the machine's clock: they are the sockets' (a test's
  // clock that stands still would hold a lingering connection, and Stop, forever). The
  // agent's own behaviour (transitions, held calls, the change feed) is on options.clock.
  http.random = options.random;
  http.body_limit = kBodyLimit;
  // The control plane polls its agents all the time; what changes something is still logged.
  http.quiet_reads = true;
  http.logged_headers = CallerFields();
  if (!options.listen) {
    server->sim_url_ = options.sim_url;
    return server;
  }
  AgentServer* self = server.get();
  server->server_ = FP_TRY(http::HttpServer::Start(
      http, [self](const http::HttpRequest& request) { return self->Handle(request); }));
  server->port_ = server->server_->port();
  return server;
}

uint16_t AgentServer::port() const { return port_; }

std::vector<std::pair<std::string, std::string>> AgentServer::Endpoints() const {
  auto endpoints = routes_.Patterns();
  if (test_faults_) {
    for (const char* method : {"GET", "POST", "DELETE"}) endpoints.emplace_back(method, "/faults");
    endpoints.emplace_back("POST", "/reset");
  }
  return endpoints;
}

std::string AgentServer::base_url() const {
  if (!sim_url_.empty()) return sim_url_;
  return fmt::format("http://{}:{}", http::UrlHost(host_), port());
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

http::HttpResponse AgentServer::Handle(const http::HttpRequest& request) {
  // Before anything else: what a stranger sends is not even routed.
  if (secret_ && !secret_->Accepts(request.Header("authorization"))) {
    return ErrorAnswer(Error::Unauthenticated(std::string(agents::kAgentSecretRefusal)),
                       request.request_id);
  }
  if (test_faults_ && (request.path == "/faults" || request.path == "/reset")) {
    return Answer(HandleControl(request), request.request_id);
  }
  auto route = routes_.Find(request.method, request.path);
  if (!route) return ErrorAnswer(RouteError(route.error(), request.path), request.request_id);

  FaultDecision decision = faults_.Admit(request.method, request.path);
  if (decision.verdict == FaultVerdict::kRefuse) {
    return ErrorAnswer(Error::Unavailable(fmt::format("{}: {}", agent_, decision.reason)),
                       request.request_id);
  }
  Result<Json> result = (*route->target)(request, route->params);
  if (decision.verdict == FaultVerdict::kHandleThenRefuse) {
    return ErrorAnswer(Error::Unavailable(fmt::format("{}: {}", agent_, decision.reason)),
                       request.request_id);
  }
  if (!result && result.error().kind() == ErrorKind::kInternal) {
    Json fields{{"agent", agent_}, {"error", result.error().message()}};
    for (const auto& [header, field] : CallerFields()) {
      if (std::string value = request.Header(header); !value.empty()) fields[field] = value;
    }
    LogEvent("error", "agent call failed", fields);
  }
  return Answer(result, request.request_id);
}

Result<Json> AgentServer::HandleControl(const http::HttpRequest& request) {
  if (request.path == "/reset") {
    if (request.method != "POST") return Fail(Error::InvalidRequest("method not allowed"));
    reset_();
    LogEvent("info", "agent state reset", {{"agent", agent_}});
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
    LogEvent("info", "fault added", {{"agent", agent_}, {"fault", rule.ToJson()}});
    faults_.Add(std::move(rule));
    return faults_.ToJson();
  }
  return Fail(Error::InvalidRequest("method not allowed"));
}

}  // namespace fp::agents::daemon
