#pragma once

// The sled agents the control plane drives (the sagas and the sled watcher alike), and what a
// sled is told about an instance. (The switch agents are the NAT reconciler's.)

#include <condition_variable>
#include <functional>
#include <map>
#include <set>

#include "agents/agents.h"
#include "common/error.h"
#include "common/mutex.h"
#include "common/uuid.h"

namespace fp::db {
class Datastore;
}  // namespace fp::db

namespace fp::loops {

// Orders the removal of a VM the datastore does not place on a sled (an orphan) against a
// start or migration that places the same instance there at the same time: without it, a
// removal judged on a datastore read taken just before the placement committed could land
// after the placement's registration and take the new VM away. Per process (one server per
// database). Thread-safe.
class VmRemovals {
 public:
  // Runs `is_orphan` (a datastore read); if it returns true, runs `remove` while placements of
  // `instance_id` wait in AwaitNone. Returns what `is_orphan` returned.
  bool RemoveIf(const Uuid& instance_id, const std::function<bool()>& is_orphan,
                const std::function<void()>& remove);
  // Returns once no removal of `instance_id` is in progress. A placement calls it after its
  // datastore placement committed and before it registers the VM on the sled.
  void AwaitNone(const Uuid& instance_id);

 private:
  Mutex mu_;
  std::condition_variable done_;
  std::set<Uuid> removing_ FP_GUARDED_BY(mu_);
};

// The sled agents the control plane drives, by sled (not owned), and the ordering of VM
// removals against placements on them. The map is set up before any saga or watcher runs and
// read-only afterwards (thread-safe reads).
struct SledAgents {
  std::map<Uuid, agents::SledAgentClient*> sleds;
  VmRemovals removals;

  // ServiceUnavailable if no agent is known for the sled.
  Result<agents::SledAgentClient*> Sled(const Uuid& sled_id) const;
};

// What a sled needs to run the instance (its NIC and attached external IPs), from the
// datastore. Errors: NotFound for an instance that is not there; the datastore's.
Result<agents::InstanceSpec> BuildInstanceSpec(db::Datastore& ds, const Uuid& instance_id);

// Registers again, on its sled, each instance the datastore records running there whose VM the
// sled lacks: for sleds that are part of the server's own process (--dev), which lose their
// VMs whenever the server stops, so that a restarted dev server brings its running instances
// back instead of failing them. Call before the sled watcher starts. Returns how many it
// registered; a VM that cannot be registered is logged and left to the watcher (which then
// fails its instance). Errors: the datastore's, reading what runs where.
Result<int> RestartLostVms(db::Datastore& ds, const SledAgents& sled_agents);

}  // namespace fp::loops
