#pragma once

// The HTTP front of both agent daemons (in memory or with a Linux dataplane): routes an agent's
// own endpoints through its fault injector, and serves the test-control endpoints, which
// answer only with DaemonOptions::test_faults (the binary's --enable-test-faults; a
// production agent answers them 404):
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
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agents/agent_secret.h"
#include "agents/daemon/faults.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/ip.h"
#include "common/random.h"
#include "http/router.h"
#include "http/server.h"

namespace fp::agents::daemon {

struct DaemonOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: the kernel picks a free port
  // Sled agent: how long an instance stays `starting` before `running`, and `stopping`
  // before `stopped`.
  std::chrono::milliseconds start_delay{0};
  std::chrono::milliseconds stop_delay{0};
  // Switch agent: the most NAT entries its table holds (0: no limit). An addition beyond it
  // cannot be installed, like a full hardware table.
  size_t nat_capacity = 0;
  // Sled agent: the underlay address GET /sled reports (the Linux dataplane's); none for a
  // simulated sled, whose address the control plane assigns.
  std::optional<IpAddr> underlay;
  // Sled agent: the serial number GET /sled reports (agents::SledIdentity); none: the control
  // plane names the sled by the agent's URL.
  std::optional<std::string> serial;
  // Whether test fault injection answers: GET, POST and DELETE /faults, POST /reset. The agent
  // binary turns it on only with --enable-test-faults, so that a production agent answers
  // them 404 like any path it does not serve; agents built inside tests have it.
  bool test_faults = true;
  // Serve over HTTP on host:port, or not at all (the simulation hands requests to Serve, and
  // base_url() is `sim_url`).
  bool listen = true;
  std::string sim_url;
  // Sled agent: apply start and stop transitions on a thread of its own, or only when
  // StepTransitions is called (the simulation, which runs on one thread).
  bool transition_thread = true;
  // Required of every call, the test endpoints' included: a call without it is answered 401
  // and changes nothing. None: anyone who reaches the port may call (agents inside tests).
  std::optional<agents::AgentSecret> secret;
  // The agent's time (transitions, held calls, the change feed's waits) and randomness (boot
  // ids, request ids); unset: the machine's. Must outlive the agent.
  const Clock* clock = nullptr;
  Random* random = nullptr;
  const Clock& clock_or_machine() const { return clock != nullptr ? *clock : MachineClock(); }
  Random& random_or_machine() const { return random != nullptr ? *random : MachineRandom(); }
};

using PathParams = http::PathParams;

// Handles one call to an agent endpoint. Returns the JSON answer (200), or null for an empty
// answer (204), or an error (answered with its kind's status).
using EndpointHandler =
    std::function<Result<nlohmann::json>(const http::HttpRequest&, const PathParams&)>;

// An agent's endpoints: (method, path pattern) → handler, e.g.
// "/instances/{id}/external-ips/{ip}". A path no pattern matches is answered NotFound
// `no endpoint <path>`; one matched with another method, InvalidRequest `method not allowed`;
// a `{param}` segment with malformed percent-encoding, InvalidRequest
// `malformed percent-encoding in "<segment>"`.
using EndpointRoutes = http::Router<EndpointHandler>;

// Parses a request body that must be a JSON object; InvalidRequest otherwise.
Result<nlohmann::json> ParseBody(const http::HttpRequest& request);
// The integer query parameter `name` of `query` (http::ParseQuery), `absent` when not given;
// InvalidRequest naming it unless it is an integer from min to max.
Result<int64_t> QueryInt(const std::map<std::string, std::string, std::less<>>& query,
                         std::string_view name, int64_t min, int64_t max, int64_t absent);

class AgentServer {
 public:
  // Starts serving `routes` on options.host:options.port. `agent` names the agent in logs and
  // messages ("switch agent"); `reset` must drop all the agent's state (POST /reset). The
  // handlers and `reset` are called on server worker threads, concurrently, from the moment
  // it listens: before Start returns, so they must reach only what exists by then. `faults`
  // (the agent's, which its handlers consult too) must outlive the server.
  // Errors: those of http::HttpServer::Start.
  static Result<std::unique_ptr<AgentServer>> Start(const DaemonOptions& options, std::string agent,
                                                    EndpointRoutes routes,
                                                    std::function<void()> reset,
                                                    FaultInjector& faults);
  ~AgentServer();
  AgentServer(const AgentServer&) = delete;
  AgentServer& operator=(const AgentServer&) = delete;

  uint16_t port() const;
  // "http://HOST:PORT" (IPv6 hosts in brackets).
  std::string base_url() const;
  FaultInjector& faults() { return faults_; }
  // Handles one request as a worker of the HTTP front would: the secret, the test endpoints,
  // the faults, the routes. Thread-safe.
  http::HttpResponse Serve(const http::HttpRequest& request) { return Handle(request); }
  // Each endpoint's (method, path pattern), the test endpoints' included when they answer.
  std::vector<std::pair<std::string, std::string>> Endpoints() const;

  // Refuses calls held by faults, stops accepting, waits for calls in progress, joins the
  // server's threads and closes the listening socket (connections are refused from then on).
  // Idempotent; call it from one thread.
  void Stop();

 private:
  AgentServer(std::string host, std::string agent, EndpointRoutes routes,
              std::function<void()> reset, FaultInjector& faults);
  http::HttpResponse Handle(const http::HttpRequest& request);
  Result<nlohmann::json> HandleControl(const http::HttpRequest& request);

  std::string host_;
  std::string agent_;
  EndpointRoutes routes_;
  std::function<void()> reset_;
  bool test_faults_ = true;
  std::optional<agents::AgentSecret> secret_;
  FaultInjector& faults_;
  std::unique_ptr<http::HttpServer> server_;
  uint16_t port_ = 0;
  std::string sim_url_;  // base_url() when not listening
};

}  // namespace fp::agents::daemon
