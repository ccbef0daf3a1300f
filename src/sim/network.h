#pragma once

// The simulation's network: the control plane's agent clients (agents/agents.h) send their
// real requests through a SimLink (an http::Caller) to an agent's handlers in process, with no
// socket. Each link decides, from a random sequence of its own seeded from the run's seed, to
// lose a request (the agent never sees it), lose the answer (the agent acted; the caller sees
// a timeout), deliver a request twice (the caller sees the second answer), or hold it back (the
// caller sees a timeout; the agent gets the request later, after newer ones: delay and
// reordering); an agent marked hung answers nothing until it is released. A link's decisions depend
// only on its seed and the order of its own calls, so runs repeat even though the NAT reconciler
// calls several switches at once.

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/mutex.h"
#include "common/random.h"
#include "http/caller.h"
#include "http/server.h"

namespace fp::sim {

// Per mille: how often a link loses a request, loses an answer, or delivers a request twice.
struct LinkFaults {
  int lose_request = 0;
  int lose_answer = 0;
  int duplicate = 0;
  int hold_back = 0;
};

// What a link delivers to: an agent's Serve.
using Endpoint = std::function<http::HttpResponse(const http::HttpRequest&)>;

class SimNetwork {
 public:
  explicit SimNetwork(uint64_t seed) : seed_(seed) {}

  // Makes `url` reach `endpoint` (replacing what it reached).
  void Attach(const std::string& url, Endpoint endpoint);
  // A caller to `url` for a client ("switch agent", "sled agent"); `timeout` is only named in
  // its timeout errors (nothing waits).
  std::unique_ptr<http::Caller> Connect(const std::string& peer, const std::string& url,
                                        std::chrono::milliseconds timeout);

  void SetFaults(LinkFaults faults);
  // While hung, every call to `url` times out.
  void SetHung(const std::string& url, bool hung);
  // Delivers requests held back, each link's oldest first, as many as `pick` says (one draw per
  // request until one stays; null: all of them); their answers go nowhere. Returns how many it
  // delivered.
  int DeliverHeldBack(Random* pick);
  // Calls delivered (each delivery of a duplicate counted) and faults injected, for the report.
  int64_t delivered() const;
  int64_t faults_injected() const;

 private:
  friend class SimLink;
  struct Route {
    Endpoint endpoint;
    bool hung = false;
    std::shared_ptr<SeededRandom> random;  // the link's decisions
    std::deque<http::HttpRequest> held_back;
  };
  // What a call to `url` meets: the endpoint (null when none or hung) and the faults to apply.
  struct Decision {
    Endpoint endpoint;
    bool lose_request = false;
    bool lose_answer = false;
    bool duplicate = false;
    bool hold_back = false;
  };
  Decision Decide(const std::string& url);
  void HoldBack(const std::string& url, http::HttpRequest request);

  const uint64_t seed_;
  mutable Mutex mu_;
  std::map<std::string, Route> routes_ FP_GUARDED_BY(mu_);
  LinkFaults faults_ FP_GUARDED_BY(mu_);
  int64_t delivered_ FP_GUARDED_BY(mu_) = 0;
  int64_t faults_injected_ FP_GUARDED_BY(mu_) = 0;
};

}  // namespace fp::sim
