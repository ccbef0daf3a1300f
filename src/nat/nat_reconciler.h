#pragma once

// Brings the switch agent's NAT table to the datastore's desired state.
//
// The datastore's nat_entry table is a versioned log (versions assigned in commit order);
// the switch keeps the generation of the last change it installed. Sync() sends the changes
// after that generation, in order; the switch never advances past a change it failed to
// install, so nothing is skipped. Repair() compares the whole tables and replaces the switch's
// on any difference (drift, a switch restarted with its state lost, a database restored to an
// earlier version). Sync sends commits as soon as they are visible, possibly before they are
// durable (holding its lock through a disk sync would serialize every attach behind it); a
// crash that then undoes them leaves the switch ahead of the datastore. The first Sync after
// the restart detects that (switch generation above the datastore's) and replaces the table;
// if newer changes already carried the datastore past the switch's generation, the full
// comparison of Repair (every 2 s in the background) finds the stale entries instead.
//
// A hung switch is called once, not once per caller: after an exchange that timed out (the
// switch did not answer within the agent timeout), Sync and Repair fail at once with that
// error for as long again as the exchange took. So a caller that waited for the lock behind
// the timed-out exchange (the background sync, say), or the best-effort sync of an undo right
// after, does not wait out another timeout; an operation against a hung switch answers within
// about one agent timeout. The background reconciler calls again after the hold-off.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "agents/agents.h"
#include "common/error.h"
#include "db/datastore.h"
#include "db/leases.h"
#include "db/nat.h"

namespace fp::nat {

class NatReconciler {
 public:
  NatReconciler(db::Datastore& ds, agents::SwitchAgentClient& switch_agent)
      : ds_(ds), switch_(switch_agent) {}
  ~NatReconciler() { StopBackground(); }

  // Sends the switch every change it lacks. Returns once the switch acknowledged all changes
  // committed before the call. ServiceUnavailable naming the switch agent if it does not
  // answer (or timed out within the hold-off above), or refuses a change, or installs only
  // part of it. Thread-safe (calls are serialized).
  Status Sync();
  // Full comparison; replaces the switch's table if it differs. Returns true if it repaired.
  // Errors as Sync's.
  Result<bool> Repair();
  // Deletes removed rows no switch needs any more: removed below both the datastore's version
  // and the switch's generation, more than kGarbageRetention before `now` (§5.6). Stops at the
  // first error (an unreachable switch deletes nothing). Returns how many rows it deleted.
  // Needs no lock against Sync: the switch has installed every removal it deletes, and a switch
  // that restarts empty needs no removals.
  Result<int64_t> CollectGarbage(Timestamp now);
  static constexpr Timestamp kGarbageRetention = int64_t{14} * 24 * 3600 * 1000 * 1000;  // 2 weeks
  static constexpr std::chrono::seconds kGarbagePeriod{30};

  // Runs Sync + Repair every `period_ms`, and CollectGarbage every kGarbagePeriod, on a thread
  // of its own until StopBackground(). With `lease` (several servers on one database), Repair
  // and CollectGarbage run only while this server holds it; Sync runs on every server (the
  // switch skips the changes it has, so concurrent Syncs are harmless). StopBackground
  // releases the lease. `lease` must outlive the reconciler.
  void StartBackground(int period_ms, db::TaskLeaseKeeper* lease = nullptr);
  void StopBackground();

  static agents::NatEntry ToEntry(const model::NatEntry& row);

 private:
  Status SyncLocked();          // requires sync_mu_
  Result<bool> RepairLocked();  // requires sync_mu_
  // Runs `exchange` (a locked Sync or Repair) unless the switch timed out within the hold-off,
  // and starts a hold-off if it times out now. Requires sync_mu_.
  template <typename T, typename Exchange>
  Result<T> UnlessHung(Exchange exchange);

  // The last exchange's timeout and the end of its hold-off (guarded by sync_mu_); reset by
  // any exchange that ends otherwise.
  struct Hung {
    std::chrono::steady_clock::time_point until;
    Error error;
  };
  std::optional<Hung> hung_;

  db::Datastore& ds_;
  agents::SwitchAgentClient& switch_;
  std::mutex sync_mu_;
  // The switch's generation as of our last successful exchange (guarded by sync_mu_); unknown
  // after any error, so the next Sync asks the switch first.
  std::optional<int64_t> known_generation_;
  db::TaskLeaseKeeper* lease_ = nullptr;  // set before the background thread starts
  std::mutex bg_mu_;
  std::condition_variable bg_cv_;
  bool bg_stop_ = false;
  std::thread bg_;
};

}  // namespace fp::nat
