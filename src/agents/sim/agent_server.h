#pragma once

// The HTTP front shared by the simulated agents: routes an agent's own endpoints through its
// fault injector, and serves the test-control endpoints every simulated agent has:
//
//   POST   /faults  body FaultRule   adds a fault (replacing one for the same endpoint);
//                                    answers the list as GET does
//   GET    /faults                   {"faults": [...], "held_calls": N}
//   DELETE /faults                   removes every fault; calls held by a hang proceed
//   POST   /reset                    loses all agent state, as a restart would (faults stay:
//                                    they belong to the test, not to the agent)
//
// These control endpoints are never subject to faults. Errors are answered as
// {"request_id", "error_code", "message"} with the status of the error's kind.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "agents/sim/faults.h"
#include "api/http_server.h"
#include "common/error.h"

namespace fp::agents::sim {

struct SimOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: the kernel picks a free port
  // Sled agent: how long an instance stays `starting` before `running`, and `stopping`
  // before `stopped`.
  std::chrono::milliseconds start_delay{0};
  std::chrono::milliseconds stop_delay{0};
  // Switch agent: the most NAT entries its table holds (0: no limit). An addition beyond it
  // cannot be installed, like a full hardware table.
  size_t nat_capacity = 0;
};

// Path parameters captured from `{name}` segments, percent-decoded.
using PathParams = std::map<std::string, std::string, std::less<>>;

// Handles one call to an agent endpoint. Returns the JSON answer (200), or null for an empty
// answer (204), or an error (answered with its kind's status).
using EndpointHandler =
    std::function<Result<nlohmann::json>(const api::HttpRequest&, const PathParams&)>;

// An agent's endpoints: (method, path pattern) → handler. Patterns are literal segments and
// `{name}` segments, e.g. "/instances/{id}/external-ips/{ip}". (The simulated agents keep their
// own small router so that they depend on the HTTP server only, not on the API layer.)
class EndpointRoutes {
 public:
  struct Match {
    const EndpointHandler* handler;
    PathParams params;
  };

  void Add(std::string method, std::string_view pattern, EndpointHandler handler);
  // NotFound when no pattern matches the path; InvalidRequest `method not allowed` when one
  // does but not with this method, or a segment's percent-encoding is invalid.
  Result<Match> Find(std::string_view method, std::string_view path) const;

 private:
  struct Route {
    std::string method;
    std::vector<std::string> segments;
    EndpointHandler handler;
  };
  std::vector<Route> routes_;
};

// Parses a request body that must be a JSON object; InvalidRequest otherwise.
Result<nlohmann::json> ParseBody(const api::HttpRequest& request);

class AgentServer {
 public:
  // Starts serving `routes` on options.host:options.port. `agent` names the agent in logs and
  // messages ("switch agent"); `reset` must drop all the agent's state (POST /reset). The
  // handlers and `reset` are called on server worker threads, concurrently.
  // Errors: those of api::HttpServer::Start.
  static Result<std::unique_ptr<AgentServer>> Start(const SimOptions& options, std::string agent,
                                                    EndpointRoutes routes,
                                                    std::function<void()> reset);
  ~AgentServer();
  AgentServer(const AgentServer&) = delete;
  AgentServer& operator=(const AgentServer&) = delete;

  uint16_t port() const;
  // "http://HOST:PORT" (IPv6 hosts in brackets).
  std::string base_url() const;
  FaultInjector& faults() { return faults_; }

  // Refuses calls held by faults, stops accepting, waits for calls in progress, joins the
  // server's threads and closes the listening socket (connections are refused from then on).
  // Idempotent; call it from one thread.
  void Stop();

 private:
  AgentServer(std::string host, std::string agent, EndpointRoutes routes,
              std::function<void()> reset);
  api::HttpResponse Handle(const api::HttpRequest& request);
  Result<nlohmann::json> HandleControl(const api::HttpRequest& request);

  std::string host_;
  std::string agent_;
  EndpointRoutes routes_;
  std::function<void()> reset_;
  FaultInjector faults_;
  std::unique_ptr<api::HttpServer> server_;
  uint16_t port_ = 0;
};

}  // namespace fp::agents::sim
