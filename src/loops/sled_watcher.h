#pragma once

// The sled watcher: makes the datastore follow what sleds report about instances' VMs, and
// sleds follow what the datastore places on them.
//
// Each sled reports its changes (GET /changes, a long poll: agents.h SledReport), so an idle
// rack costs one waiting call per sled, not a call per instance, and a change reaches the
// datastore as soon as the sled makes it. A reported VM the datastore, read after the report
// was taken, agrees with (most reports carry what the control plane itself just did) needs
// nothing; any other is judged as a full pass judges it (below), on the datastore read first
// and the sled asked again after. Every
// `full_period` (and after the sled's agent restarted or the watcher fell behind its feed) a
// full comparison of the sled (WatchSled) repairs what a report could not carry: a VM the
// sled lost while no report was read, a port drifting from the datastore's addresses.
//
// A comparison records run-state changes of instances that have a VMM, settles instances
// whose VM stopped, failed or vanished, puts right the external addresses of running VMs'
// ports (ReconcilePort), and removes VMs a sled holds that the datastore does not place there
// (orphans).
#include <chrono>
#include <condition_variable>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/time.h"
#include "db/lease_fence.h"
#include "loops/sled_agents.h"
#include "model/external_ips.h"
#include "model/instances.h"

namespace fp::db {
class Datastore;
class TaskLeaseKeeper;
}  // namespace fp::db

namespace fp::loops {

class NatReconciler;

// How the watcher's threads pace themselves.
struct SledWatchOptions {
  // Between two full comparisons of one sled.
  std::chrono::milliseconds full_period{5000};
  // The longest a report call waits for a change (the sled caps it at 30 s); shorter when a
  // comparison is due sooner.
  std::chrono::milliseconds report_wait{10'000};
  // After a report call failed (the sled down), before the next one; and after a pass in
  // which a removal failed, before the sled is compared again (doubling up to full_period).
  std::chrono::milliseconds retry{200};
  // A sled whose agent has not answered for this long has lost its instances as far as anyone
  // can tell: those still shown running (or stopping) are failed, their NAT removed, so that
  // they can be started again elsewhere (Oxide's failed state). Checked again every
  // full_period while it does not answer.
  std::chrono::milliseconds unresponsive_after{60'000};
  // After a report that only confirmed what the control plane itself did (a start, an address
  // added: every VM agreed with the datastore), before the next report call: under load the
  // confirmations then come several to a report instead of one exchange each. A change the
  // control plane did not make arrives at most this much later.
  std::chrono::milliseconds confirmation_linger{20};
};

// Per sled, what the watcher last heard (for /metrics and the sled views). Whether it answers
// is also recorded in the datastore when it changes (db::SledRecordAgent), for every server.
struct SledWatchStatus {
  Uuid sled_id;
  std::string address;
  Timestamp last_report = 0;  // when its last report (or full list) arrived; 0: never
  int64_t reports = 0;        // reports read, full ones included
  int64_t restarts_seen = 0;  // times its agent's run (boot id) changed under the watcher
  // Report calls that returned (a report or a failure) after this server lost the
  // sled-watcher lease, or in a later tenure of it: their answers left to the lease's holder,
  // or to this server's next look from a full list.
  int64_t calls_set_aside = 0;
  bool reachable = false;  // its last call answered
};

// Start, Stop and Wake are thread-safe. A pass may also run on a caller's thread beside the
// watcher's (tests do): each of its steps is idempotent, and VmRemovals orders removals against
// placements.
class SledWatcher {
 public:
  // How long a removal's mark holds placements back if this server dies amid the removal.
  static constexpr std::chrono::seconds kRemovalMarkTtl{10};

  // The references must outlive the watcher.
  SledWatcher(db::Datastore& ds, SledAgents& sled_agents, NatReconciler& nat);
  ~SledWatcher() { Stop(); }
  SledWatcher(const SledWatcher&) = delete;
  SledWatcher& operator=(const SledWatcher&) = delete;

  // Starts a thread per sled (reports and full comparisons), one for Wake, and one for the
  // sleds the datastore knows that no agent here serves (silent from the start; their
  // instances failed after unresponsive_after). Call once.
  // With `lease` (several servers on one database), the sleds are watched only while this
  // server holds it, so one server watches them at a time; `lease` must outlive the watcher.
  // A thread of the watcher keeps the lease (KeepLease): a holder's sled threads wait in report
  // calls far longer than a lease lasts. A report call already waiting when the lease is lost
  // (this server paused, or cut off from the database) is still applied: each step of a
  // judgement is idempotent and made on a read taken after the report came.
  void Start(SledWatchOptions options, db::TaskLeaseKeeper* lease = nullptr);
  // Stops and joins the threads (idempotent; no effect without threads). A report call in
  // progress ends within the agent timeout plus its wait.
  void Stop();
  // Removes orphan VMs from every sled now, on the Wake thread (no effect without threads).
  void Wake();

  // A full comparison of every sled, on the caller's thread.
  void WatchOnce();
  // A full comparison of one sled: the datastore's instances on it first, then the sled's
  // list; each instance judged against its VM, and each VM the datastore does not place there
  // removed. Returns the sled calls that failed (its listing, a removal): the sled's thread
  // then compares it again soon rather than a full period later. ApplyReport likewise.
  // `fence`: the lease's as the look began (LookFence), carried by every write; none without a
  // lease (ApplyReport and ReapOrphans likewise).
  int WatchSled(const Uuid& sled_id, agents::SledAgentClient& sled,
                const db::LeaseFence* fence = nullptr);
  // Judges the VMs of `report` (changed or removed on the sled `sled_id`), first all on one
  // datastore read taken after the report came: one the read agrees with as reported is left
  // alone (a later change comes with a later report); any other is judged on the sled's answer
  // for it, asked after the read (durable first), and judged again (a read of its own, a fresh
  // answer) when a request changed the row in between:
  // the report will not come again, so a declined judgement would wait for a full comparison.
  // `confirmed_only` (if given): set to whether every VM of the report agreed as reported.
  int ApplyReport(const Uuid& sled_id, agents::SledAgentClient& sled,
                  const agents::SledReport& report, bool* confirmed_only = nullptr,
                  const db::LeaseFence* fence = nullptr);
  // Removes from every sled each VM, whatever its state (stopped included), that the datastore
  // does not place on that sled: the VM of a deleted or stopped instance, of an instance now
  // on another sled, or of no instance at all. A removal that fails is logged and tried again
  // on the next pass, so sleds converge once they answer.
  void ReapOrphans(const db::LeaseFence* fence = nullptr);

  std::vector<SledWatchStatus> SledStatuses() const;

 private:
  // Judges `instance` (read from the datastore) against its VM as the sled reported it after
  // that read (nullopt: the sled does not hold it).
  // `ips`: the instance's external IPs if already read (after `vm`), else read here.
  // Returns the sled calls that failed, as WatchSled. Sets `*outran` (if given) when the
  // judgement was declined because the row changed after `instance` was read (a request wrote
  // it meanwhile): the caller may judge again on a fresh read.
  int WatchInstance(const model::Instance& instance, agents::SledAgentClient& sled,
                    const std::optional<agents::SledInstance>& vm,
                    const std::vector<model::ExternalIp>* ips, bool* outran,
                    const db::LeaseFence* fence);
  // Whether the instance's start saga is at rest (or gone): a VM it registered is then on the
  // sled unless lost. False when the datastore cannot say.
  bool StartSagaAtRest(const model::Instance& instance);
  // Removes `vm` if it is an orphan, logging what happened.
  // Returns the sled calls that failed (0 or 1).
  int ReapIfOrphan(const Uuid& sled_id, agents::SledAgentClient& sled,
                   const agents::SledInstance& vm, const db::LeaseFence* fence);
  // The lease's own thread: looks at the lease every eighth of its TTL (TaskLeaseKeeper::Held,
  // which renews it once half is left, so a renewal starts with at least 3/8 of the TTL to
  // spare, and takes it once it is free or ran out), so that a holder keeps it whatever its sled
  // threads wait for and another server takes over within an eighth of a TTL of its running
  // out; and wakes the threads waiting for it (MayWatch) while it is held.
  void KeepLease();
  // Whether this server may watch the sleds now (always, without a lease). If not, first waits
  // until the lease is held, the watcher stops, or a full period passed: a thread that finds
  // another server watching then starts again as soon as this one holds the lease.
  bool MayWatch();
  // The loop of one sled's thread.
  void WatchLoop(size_t index, const Uuid& sled_id, agents::SledAgentClient& sled);
  // Waits up to `d` or until Stop; false once stopping.
  bool Pause(std::chrono::milliseconds d);
  // The sled's agent has not answered for unresponsive_after: fails the instances the
  // datastore places there (see SledWatchOptions::unresponsive_after).
  // `agent`: its agent's address, for the log.
  void FailInstancesOfSilentSled(const Uuid& sled_id, const std::string& agent,
                                 const db::LeaseFence* fence);
  // The loop of the thread for sleds no agent of this server serves (see Start).
  void WatchUnservedSleds(const std::vector<model::Sled>& unserved);
  // The sled reported the VM stopped or failed: record it, drop its NAT, forget it on the sled.
  // Returns the sled calls that failed (0 or 1); `outran` as WatchInstance's.
  int SettleStopped(const model::Instance& instance, agents::SledAgentClient& sled,
                    model::RunState run_state, bool* outran, const db::LeaseFence* fence);
  // Removes the VM of `instance_id` from the sled `sled_id` if the datastore, read now, does
  // not place it there (see ReapOrphans). Returns std::nullopt if it is not an orphan (or the
  // datastore could not say), else the sled's answer to the unregister.
  std::optional<Status> RemoveIfOrphan(const Uuid& sled_id, agents::SledAgentClient& sled,
                                       const Uuid& instance_id, const db::LeaseFence* fence);

  // How long a sled's calls must have failed before it is recorded silent (placements then
  // avoid it).
  static constexpr std::chrono::seconds kSilentAfter{2};

  db::Datastore& ds_;
  SledAgents& sled_agents_;
  NatReconciler& nat_;
  const std::string removal_holder_;      // this process, in marks
  SledWatchOptions options_;              // set before the threads start
  db::TaskLeaseKeeper* lease_ = nullptr;  // likewise
  // The lease's fencing token as a judgement beginning now carries it to each of its writes
  // (nullopt without a lease): this tenure's (TaskLeaseKeeper::fence), taken when a thread's
  // look begins, so that a judgement under way when the lease was lost writes nothing, even
  // after this server took the lease back.
  std::optional<db::LeaseFence> LookFence() const;
  mutable Mutex mu_;
  std::condition_variable cv_;
  bool stop_ FP_GUARDED_BY(mu_) = false;
  bool now_ FP_GUARDED_BY(mu_) = false;
  int64_t lease_held_looks_ FP_GUARDED_BY(mu_) = 0;         // KeepLease's looks that found it held
  std::vector<SledWatchStatus> status_ FP_GUARDED_BY(mu_);  // one per sled, in sled_agents order
  std::vector<std::thread> threads_;
};

}  // namespace fp::loops
