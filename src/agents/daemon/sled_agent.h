#pragma once

// The sled agent daemon: runs VMs (instances; simulated: start and stop take a delay) and holds
// the external addresses of each VM's port, in memory and, with a dataplane (agents/linux: the
// instance's namespace and nftables), installed on the host; served over HTTP.
//
//   PUT    /instances/{id}       body InstanceSpec (its id must be {id}) → SledInstance.
//                                Registers the instance, or replaces the spec of a known one
//                                (its external addresses become the spec's), and starts it:
//                                starting, then running after the start delay. An instance
//                                already starting, running or migrating keeps its state; one
//                                stopping, stopped or failed starts again. Idempotent.
//   POST   /instances/{id}/stop  → SledInstance: stopping, then stopped after the stop delay.
//                                An unknown instance answers 200 with state stopped; a failed
//                                one becomes stopped at once. Idempotent.
//   DELETE /instances/{id}       forgets the instance, whatever its state → 204. Idempotent.
//   GET    /sled                 {"underlay_address": "..." (null for a simulated sled),
//                                  "serial": "..." (null unless the agent was given one)}
//   GET    /instances            {"instances": [SledInstance...]}, sorted by id
//   GET    /instances/{id}       SledInstance; 404 if unknown
//   GET    /changes?boot=B&since=G&wait_ms=W
//                                SledReport: what changed since generation G of the agent's
//                                run B (see SledReport in agents.h). Every change to a VM (its
//                                registration, spec, state, port addresses, removal) takes the
//                                next generation. With nothing after G, the call waits up to W
//                                ms (at most kMaxReportWaitMs) for a change. A B that is not
//                                this run's (or empty), or a G older than the removals the
//                                agent remembers (kRemovalsKept), answers the whole list
//                                ("full": true) at once.
//   PUT    /instances/{id}/external-ips/{ip}   the port gains the address → SledInstance
//   DELETE /instances/{id}/external-ips/{ip}   the port loses the address → SledInstance
//                                Both idempotent; 404 if the instance is unknown.
//
// A SledInstance's `external_ips` lists the floating and ephemeral addresses in the order they
// were added, then the SNAT address last if the spec has one (`snat_ip` names it). Removing the
// SNAT address through the external-ips endpoint is refused (400): it belongs to the spec.
//
// With a port dataplane (PortDataplane: the Linux agent's namespaces and nftables) every
// registration, address change and removal also takes effect there before the agent answers;
// one the dataplane refuses is answered with its error and changes nothing here.
//
// State transitions after a delay are made by one timer thread per agent, never by sleeping
// request threads. Plus the fault and reset endpoints of every simulated agent
// (agent_server.h); a reset forgets every instance and starts a new run (boot id).

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agents/agents.h"
#include "agents/daemon/agent_server.h"
#include "agents/port_dataplane.h"
#include "common/mutex.h"

namespace fp::agents::daemon {

class SledAgentDaemon {
 public:
  // Starts serving on options.host:options.port with options.start_delay and stop_delay.
  // Errors: those of http::HttpServer::Start.
  static Result<std::unique_ptr<SledAgentDaemon>> Start(
      const DaemonOptions& options, std::unique_ptr<PortDataplane> dataplane = nullptr);
  ~SledAgentDaemon();
  SledAgentDaemon(const SledAgentDaemon&) = delete;
  SledAgentDaemon& operator=(const SledAgentDaemon&) = delete;

  uint16_t port() const { return server_->port(); }
  std::string base_url() const { return server_->base_url(); }
  std::vector<std::pair<std::string, std::string>> Endpoints() const {
    return server_->Endpoints();
  }
  // Stops serving and the timer thread; calls held by faults are refused. Idempotent.
  void Stop();

  // Direct access for tests; thread-safe.
  std::vector<SledInstance> Instances() const;
  std::optional<SledInstance> Instance(const Uuid& id) const;
  std::optional<InstanceSpec> Spec(const Uuid& id) const;
  // Forces an instance into `state` (e.g. migrating or failed, which no endpoint produces) and
  // cancels its pending transition. False if the instance is unknown.
  bool ForceState(const Uuid& id, VmState state);
  FaultInjector& faults() { return faults_; }
  // GET /changes, for tests: waits up to `wait` when nothing changed after `since`.
  SledReport Changes(const std::string& boot_id, int64_t since, std::chrono::milliseconds wait);
  // Calls of Changes (GET /changes) waiting now for a change.
  int waiting_reports() const;
  // Applies the start and stop transitions due at the clock's time: what the transition thread
  // does when it runs, for an agent started without it (DaemonOptions::transition_thread).
  void StepTransitions();
  // Handles one request as the HTTP front would (the simulation's network calls it).
  http::HttpResponse Serve(const http::HttpRequest& request) { return server_->Serve(request); }

  // Removals remembered for /changes; a caller further behind gets the whole list.
  static constexpr size_t kRemovalsKept = 4096;
  static constexpr int64_t kMaxReportWaitMs = 30'000;

 private:
  using TimePoint = MonoTime;

  struct Vm {
    InstanceSpec spec;
    VmState state = VmState::kStopped;
    // When starting becomes running, or stopping becomes stopped.
    std::optional<TimePoint> transition_at;
    int64_t boots = 0;  // starting -> running transitions so far
    int64_t gen = 0;    // the agent's generation at this VM's last change
  };

  SledAgentDaemon(const DaemonOptions& options, std::unique_ptr<PortDataplane> dataplane);
  EndpointRoutes Routes();
  Result<SledInstance> EnsureRunning(const Uuid& id, InstanceSpec spec);
  SledInstance StopInstance(const Uuid& id);
  Result<SledInstance> ChangeExternalIp(const Uuid& id, const IpAddr& ip, bool add);
  void Reset();
  void RunTransitions();
  // Moves every VM whose start or stop delay has passed; the next such time, if any.
  std::optional<TimePoint> ApplyDueTransitions() FP_REQUIRES(mu_);
  // Records a change to `vm`: the next generation, and wakes /changes.
  void Touch(Vm& vm) FP_REQUIRES(mu_);
  // Forgets the VM `id` if known, remembering the removal for /changes.
  void Forget(const Uuid& id) FP_REQUIRES(mu_);
  static SledInstance View(const Uuid& id, const Vm& vm);

  const std::unique_ptr<PortDataplane> dataplane_ FP_PT_GUARDED_BY(mu_);  // may be null
  const std::optional<IpAddr> underlay_;
  const std::optional<std::string> serial_;
  const Clock& clock_;
  Random& random_;
  const std::chrono::milliseconds start_delay_;
  const std::chrono::milliseconds stop_delay_;

  mutable Mutex mu_;
  std::condition_variable transitions_changed_;
  std::map<Uuid, Vm> vms_ FP_GUARDED_BY(mu_);
  bool stopping_ FP_GUARDED_BY(mu_) = false;
  // The change feed: this run's id, the last generation given out, the removals after
  // removals_floor_ with their generations, oldest first.
  std::string boot_id_ FP_GUARDED_BY(mu_);
  int64_t generation_ FP_GUARDED_BY(mu_) = 0;
  std::deque<std::pair<int64_t, Uuid>> removals_ FP_GUARDED_BY(mu_);
  int64_t removals_floor_ FP_GUARDED_BY(mu_) = 0;
  int waiting_reports_ FP_GUARDED_BY(mu_) = 0;
  std::condition_variable changed_;
  std::thread timer_;
  // The handlers' fault injector: here, not in server_, which Start assigns after the server
  // began to listen (a call may arrive before). Declared before it, so destroyed after it.
  FaultInjector faults_;
  std::unique_ptr<AgentServer> server_;
};

}  // namespace fp::agents::daemon
