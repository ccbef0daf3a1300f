#pragma once

// Fault injection for the simulated agents, driven over each agent's own API (POST /faults),
// so that tests can make an agent fail the way a real network and a real agent do.

#include <condition_variable>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/error.h"
#include "common/mutex.h"

namespace fp::agents::daemon {

// One fault, as posted to /faults:
//   {"endpoint": "POST /nat/changes", "fail_next": 2, "apply_then_fail": 0, "delay_ms": 0,
//    "hang": false, "apply_first": 3}
// `endpoint` is "*" (every endpoint except the fault endpoints) or "<METHOD> <path>" where
// METHOD may be "*" and each path segment may be "*" to match any one segment
// ("PUT /instances/*/external-ips/*").
struct FaultRule {
  std::string endpoint;
  int64_t fail_next = 0;        // answer 503 to the next N matching calls without handling them
  int64_t apply_then_fail = 0;  // handle the next N matching calls, then answer 503
  int64_t delay_ms = 0;         // wait this long before handling every matching call
  bool hang = false;            // hold every matching call until the faults are cleared
  // Batch endpoints (the switch's POST /nat/changes): every matching call applies only the
  // first K items of its batch and reports the next one as not installed, until the faults
  // are cleared (a switch that fails part way through a batch). Unset: no effect.
  std::optional<int64_t> apply_first;

  bool Matches(std::string_view method, std::string_view path) const;
  // A rule with nothing left to do (counts used up, no delay, no hang, no apply_first).
  bool Spent() const;
  nlohmann::json ToJson() const;
  // InvalidRequest naming the field for a malformed rule or one that does nothing.
  static Result<FaultRule> FromJson(const nlohmann::json& j);
};

// What to do with a call after the faults had their say.
enum class FaultVerdict {
  kHandle,            // handle it normally
  kRefuse,            // answer 503 without handling it
  kHandleThenRefuse,  // handle it, then answer 503 instead of the real answer
};

struct FaultDecision {
  FaultVerdict verdict = FaultVerdict::kHandle;
  std::string reason;  // for the 503 message: which fault fired
};

// The faults configured on one agent. Thread-safe.
class FaultInjector {
 public:
  // `clock` (a rule's delay) must outlive the injector.
  explicit FaultInjector(const Clock& clock) : clock_(clock) {}

  // Adds `rule`, replacing an existing rule for the same endpoint text.
  void Add(FaultRule rule);
  // Removes every rule and releases every call held by a hang (those calls are then handled).
  void Clear();
  // {"faults": [rules...], "held_calls": N}: N counts calls waiting in a delay or a hang.
  nlohmann::json ToJson() const;
  // Calls currently held by a delay or a hang (tests poll this to know a call is hanging).
  int held_calls() const;

  // Applies the rules matching `method path` to one call: waits out the largest matching delay,
  // then holds the call while a matching hang rule exists, then consumes one fail_next (first)
  // or apply_then_fail count of the first matching rule that has one. Blocks the calling
  // thread; returns kRefuse at once if the injector is shut down.
  FaultDecision Admit(std::string_view method, std::string_view path);
  // For a batch endpoint: how many items of the call's batch to apply (the smallest
  // apply_first of the rules matching `method path`), or nullopt to apply them all.
  std::optional<int64_t> ApplyFirst(std::string_view method, std::string_view path) const;

  // Releases every held call (they are refused) and disables delays and hangs from now on, so
  // that the agent can stop. Idempotent.
  void Shutdown();

 private:
  const Clock& clock_;
  mutable Mutex mu_;
  std::condition_variable changed_;
  std::vector<FaultRule> rules_ FP_GUARDED_BY(mu_);
  int held_calls_ FP_GUARDED_BY(mu_) = 0;
  bool shut_down_ FP_GUARDED_BY(mu_) = false;
};

}  // namespace fp::agents::daemon
