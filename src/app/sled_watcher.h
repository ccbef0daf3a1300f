#pragma once

// The sled watcher: makes the datastore follow what sleds report about instances' VMs, and
// sleds follow what the datastore places on them. A pass (WatchOnce) records run-state changes
// of instances that have a VMM, settles instances whose VM stopped, failed or vanished, puts
// right the external addresses of running VMs' ports (ReconcilePort), and removes VMs a sled
// holds that the datastore does not place there (ReapOrphans). Passes run on a thread of its
// own every period, or at once when woken.
//
// Instances the watcher leaves alone: those with a migration in flight (both ends hold a VM
// until the migration saga settles which one stays), `rebooting` ones (the reboot stops and
// starts the VM itself), and `starting` ones whose VM is not on the sled yet (the start saga
// still owns them).

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "app/dataplane.h"
#include "model/instances.h"

namespace fp::db {
class Datastore;
class TaskLeaseKeeper;
}  // namespace fp::db

namespace fp::nat {
class NatReconciler;
}  // namespace fp::nat

namespace fp::app {

// Start, Stop and Wake are thread-safe. A pass may also run on a caller's thread beside the
// watcher's (tests do): each of its steps is idempotent, and VmRemovals orders removals against
// placements.
class SledWatcher {
 public:
  // The references must outlive the watcher.
  SledWatcher(db::Datastore& ds, Dataplane& dataplane, nat::NatReconciler& nat)
      : ds_(ds), dataplane_(dataplane), nat_(nat) {}
  ~SledWatcher() { Stop(); }
  SledWatcher(const SledWatcher&) = delete;
  SledWatcher& operator=(const SledWatcher&) = delete;

  // Starts the thread: a pass every `period_ms`. Call once. With `lease` (several servers on
  // one database), a pass runs only while this server holds it, so one server watches the
  // sleds at a time; `lease` must outlive the watcher.
  void Start(int period_ms, db::TaskLeaseKeeper* lease = nullptr);
  // Stops and joins the thread (idempotent; no effect without a thread).
  void Stop();
  // Makes the thread start its next pass now (no effect without a thread).
  void Wake();

  // One pass, on the caller's thread.
  void WatchOnce();
  // Removes from every sled each VM, whatever its state (stopped included), that the datastore
  // does not place on that sled: the VM of a deleted or stopped instance, of an instance now
  // on another sled, or of no instance at all. A removal that fails is logged and tried again
  // on the next pass, so sleds converge once they answer.
  void ReapOrphans();

 private:
  // The sled reported the VM stopped or failed: record it, drop its NAT, forget it on the sled.
  void SettleStopped(const model::Instance& instance, agents::SledAgentClient& sled,
                     const std::string& run_state);
  // Removes the VM of `instance_id` from the sled `sled_id` if the datastore, read now, does
  // not place it there (see ReapOrphans). Returns std::nullopt if it is not an orphan (or the
  // datastore could not say), else the sled's answer to the unregister.
  std::optional<Status> RemoveIfOrphan(const Uuid& sled_id, agents::SledAgentClient& sled,
                                       const Uuid& instance_id);

  // How long a removal's mark holds placements back if this server dies amid the removal.
  static constexpr std::chrono::seconds kRemovalMarkTtl{10};

  db::Datastore& ds_;
  Dataplane& dataplane_;
  nat::NatReconciler& nat_;
  const std::string removal_holder_ = Uuid::Random().ToString();  // this process, in marks
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  bool now_ = false;   // guarded by mu_
  std::thread thread_;
};

}  // namespace fp::app
