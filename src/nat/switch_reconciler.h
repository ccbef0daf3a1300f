#pragma once

// One switch agent as the NAT reconciler (nat_reconciler.h) drives it: its Sync of the change
// feed, its heartbeat (Check), the whole-table reload of an agent that restarted empty and the
// repair of one that drifted, and what it reports to /metrics. Thread-safe: exchanges with the
// switch are serialized.

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "agents/agents.h"
#include "common/error.h"
#include "db/datastore.h"
#include "nat/nat_reconciler.h"

namespace fp::nat {

class SwitchReconciler {
 public:
  SwitchReconciler(db::Datastore& ds, DesiredNat& desired,
                   std::shared_ptr<agents::SwitchAgentClient> client);

  // Sync; `unreachable` tells a switch that did not answer from one that refused.
  Status Sync(bool& unreachable);

  Result<bool> Repair();

  // The heartbeat: where the switch is, and what it needs. `lead`: this server reloads and
  // repairs (with several servers, the lease holder).
  Status Check(bool lead);

  // The switch's generation now (for garbage collection).
  Result<int64_t> Generation();

  SwitchNatStatus Snapshot() const;

  agents::SwitchAgentClient& client() { return *client_; }

 private:
  // Asks the switch where it is; records whether it answered.
  Result<agents::NatStatus> Ask();

  // Records an exchange: the generation the switch reported, or the error it failed with.
  void Answered(std::optional<int64_t> generation, const Error* error);

  template <typename T, typename Exchange>
  Result<T> UnlessHung(Exchange exchange);

  Status SyncLocked();

  // Replaces the table of a switch found at `at` (empty, or restarted) with the desired one.
  Status Reload(const agents::NatStatus& at, bool restarted);

  Result<bool> RepairLocked();

  struct Hung {
    std::chrono::steady_clock::time_point until;
    Error error;
  };

  db::Datastore& ds_;
  DesiredNat& desired_;
  const std::shared_ptr<agents::SwitchAgentClient> client_;
  std::mutex sync_mu_;
  // The last exchange's timeout and the end of its hold-off; reset by any exchange that ends
  // otherwise (guarded by sync_mu_).
  std::optional<Hung> hung_;
  // The switch's run and generation as of our last successful exchange (guarded by sync_mu_);
  // the generation is unknown after any error, so the next Sync asks the switch first.
  std::optional<std::string> known_boot_;
  std::optional<int64_t> known_generation_;
  bool refused_ = false;  // the last Sync's failure was the switch refusing (guarded by sync_mu_)
  mutable std::mutex status_mu_;
  SwitchNatStatus status_;      // guarded by status_mu_
  bool ever_answered_ = false;  // guarded by status_mu_
};

}  // namespace fp::nat
