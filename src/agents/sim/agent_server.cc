#include "agents/sim/agent_server.h"

#include <fmt/format.h>

#include "api/json_input.h"
#include "api/log.h"

namespace fp::agents::sim {

using Json = nlohmann::json;

namespace {

// Calls held by a hang occupy a worker thread each; the control endpoints need one free
// worker to release them, so there are more workers than the tests ever hold calls.
constexpr int kWorkerThreads = 32;
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

}  // namespace

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
  http.worker_threads = kWorkerThreads;
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
  Result<Json> result = (*route->target)(request, route->params);
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
    Json body = FP_TRY(api::ParseBodyObject(request.body));
    FaultRule rule = FP_TRY(FaultRule::FromJson(body));
    api::LogEvent("info", "fault added", {{"agent", agent_}, {"fault", rule.ToJson()}});
    faults_.Add(std::move(rule));
    return faults_.ToJson();
  }
  return Fail(Error::InvalidRequest("method not allowed"));
}

}  // namespace fp::agents::sim
