#pragma once

// Instances on sleds: create, start, stop, reboot, migrate and delete, the first four of
// which (create, start, migrate, delete) run as sagas. The instance's run state follows its
// sled agent (a watcher polls the sleds of instances that have a VMM).

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agents/agents.h"
#include "app/actor.h"
#include "app/floating_ips.h"
#include "app/projects.h"
#include "db/instances.h"
#include "nat/nat_reconciler.h"
#include "saga/saga.h"

namespace fp::app {

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
  std::mutex mu_;
  std::condition_variable done_;
  std::set<Uuid> removing_;  // guarded by mu_
};

// The agents the control plane drives, by sled (not owned), and the ordering of VM removals
// against placements on them.
struct Dataplane {
  agents::SwitchAgentClient* switch_agent = nullptr;
  std::map<Uuid, agents::SledAgentClient*> sleds;
  VmRemovals removals;

  // ServiceUnavailable if no agent is known for the sled.
  Result<agents::SledAgentClient*> Sled(const Uuid& sled_id) const;
};

// An external IP requested at instance create.
struct RequestedExternalIp {
  bool ephemeral = true;
  model::PoolSelector selector;  // ephemeral
  NameOrId floating_ip{Uuid()};  // floating: by name in the instance's project, or by id
};

// Oxide's limits on an instance's size (nexus/src/app/mod.rs).
constexpr int64_t kMaxVcpusPerInstance = 64;
constexpr uint64_t kMinMemoryBytesPerInstance = uint64_t{1} << 30;           // 1 GiB
constexpr uint64_t kMaxMemoryBytesPerInstance = 1536 * (uint64_t{1} << 30);  // 1.5 TiB

// The size an InstanceCreate or InstanceUpdate asks for: any vCPU count and byte count the
// API's types carry (uint16, uint64). Create and Update check it with CheckInstanceSize.
struct InstanceSize {
  int64_t ncpus = 1;
  uint64_t memory = 0;
};

// Oxide's checks, in its order and words: more than 64 vCPUs is InvalidRequest `cannot have
// more than 64 vCPUs per instance`; memory below 1 GiB, not a multiple of 1 GiB, or above
// 1536 GiB is InvalidValue `unsupported value for "size": memory must be at least 1 GiB` (`...
// divisible by 1 GiB`, `... less than or equal to 1536 GiB`). Zero vCPUs, which Oxide leaves
// to the sled to refuse, is InvalidRequest `cannot have fewer than 1 vCPU per instance`.
Status CheckInstanceSize(const InstanceSize& size);

struct InstanceCreateParams {
  std::string name;
  std::string description;
  std::string hostname;
  int64_t ncpus = 1;
  uint64_t memory = 0;
  model::NicKind nic = model::NicKind::kDualStack;
  bool start = true;
  std::vector<RequestedExternalIp> external_ips;  // attached in the create saga, in order
};

// What the saga actions need; lives as long as the executor.
struct InstanceSagaDeps {
  db::Datastore& ds;
  Dataplane& dataplane;
  nat::NatReconciler& nat;
};

// What a sled needs to run the instance (its NIC and attached external IPs), from the
// datastore.
Result<agents::InstanceSpec> BuildInstanceSpec(db::Datastore& ds, const Uuid& instance_id);

// The saga definitions: each saga's nodes in execution order. The operations build their
// sagas from these and nothing else, so the saga tests, which fail every node, cover a node
// added here. Instance create has one node per requested external IP.
std::vector<saga::Node> InstanceCreateNodes(size_t external_ips);
std::vector<saga::Node> InstanceStartNodes();
std::vector<saga::Node> InstanceMigrateNodes();
std::vector<saga::Node> InstanceDeleteNodes();
std::vector<saga::Node> IpAttachNodes();
std::vector<saga::Node> IpDetachNodes();

// Registers the instance sagas' actions (instance_create.*, instance_start.*,
// instance_delete.*, instance_migrate.*) and the external IP sagas' (ip_attach.*, ip_detach.*).
void RegisterInstanceActions(saga::ActionRegistry& registry, InstanceSagaDeps& deps);
void RegisterExternalIpActions(saga::ActionRegistry& registry, InstanceSagaDeps& deps);

class Instances {
 public:
  // `projects` and `floating_ips` resolve the API's selectors as those services do.
  Instances(db::Datastore& ds, Projects& projects, FloatingIps& floating_ips, Dataplane& dataplane,
            nat::NatReconciler& nat, saga::SagaExecutor& executor)
      : ds_(ds),
        projects_(projects),
        floating_ips_(floating_ips),
        dataplane_(dataplane),
        nat_(nat),
        exec_(executor) {}
  ~Instances() { StopWatcher(); }

  // Errors, in order: NotFound for the project, Forbidden without write access, those of
  // CheckInstanceSize, then those of resolving the requested floating IPs and of the saga.
  Result<model::Instance> Create(const Actor& actor, const NameOrId& project,
                                 const InstanceCreateParams& params);
  // `project` is required with a name and forbidden with an id (§2.0).
  Result<model::Instance> Lookup(const Actor& actor, const NameOrId& instance,
                                 const std::optional<NameOrId>& project);
  Result<std::vector<model::Instance>> List(const Actor& actor, const NameOrId& project,
                                            const model::PageRequest& page);
  // Sets ncpus and memory of a stopped instance. Errors, in order: those of Lookup,
  // Forbidden without write access, those of CheckInstanceSize, InvalidRequest unless stopped.
  Result<model::Instance> Update(const Actor& actor, const NameOrId& instance,
                                 const std::optional<NameOrId>& project, const InstanceSize& size);
  Status Delete(const Actor& actor, const NameOrId& instance,
                const std::optional<NameOrId>& project);
  Result<model::Instance> Start(const Actor& actor, const NameOrId& instance,
                                const std::optional<NameOrId>& project);
  Result<model::Instance> Stop(const Actor& actor, const NameOrId& instance,
                               const std::optional<NameOrId>& project);
  Result<model::Instance> Reboot(const Actor& actor, const NameOrId& instance,
                                 const std::optional<NameOrId>& project);
  // Fleet admin only (Forbidden otherwise, before any lookup). An instance given by id is
  // found in any silo; by name, in `project` of the token's silo.
  Result<model::Instance> Migrate(const Actor& actor, const NameOrId& instance,
                                  const std::optional<NameOrId>& project, const Uuid& dst_sled);

  // Live attach and detach (external_ips.cc). Floating attach/detach answer with the floating
  // IP; ephemeral attach with the ephemeral IP. `fip_project` scopes a floating IP name.
  Result<model::ExternalIp> AttachFloating(const Actor& actor, const NameOrId& fip,
                                           const std::optional<NameOrId>& fip_project,
                                           const NameOrId& instance);
  Result<model::ExternalIp> DetachFloating(const Actor& actor, const NameOrId& fip,
                                           const std::optional<NameOrId>& fip_project);
  Result<model::ExternalIp> AttachEphemeral(const Actor& actor, const NameOrId& instance,
                                            const std::optional<NameOrId>& project,
                                            const model::PoolSelector& selector);
  Status DetachEphemeral(const Actor& actor, const NameOrId& instance,
                         const std::optional<NameOrId>& project, std::optional<IpVersion> version);
  // The instance an instance saga answers with, from the saga's parameters and last output:
  // an Idempotency-Key's replay of the request. A create without start answers the row its
  // last node committed; any other (a create that also starts the instance, a start, a
  // migrate) the instance now, as the request itself reads it after its saga, or the create's
  // row if the instance was deleted since. A create that asked for a start that never began
  // (its run state unchanged since the create saga) runs that start first, as the request
  // would have: errors then are the start's.
  Result<model::Instance> InstanceOfSaga(const Actor& actor, const saga::Json& params,
                                         const saga::Json& output);
  // The IP an attach or detach saga answered with, from the saga's output (the row as its
  // complete node committed it): an Idempotency-Key's replay of that request.
  Result<model::ExternalIp> IpOfSagaOutput(const saga::Json& output);
  // The instance's attached external IPs (SNAT, ephemeral, floating).
  Result<std::vector<model::ExternalIp>> ExternalIps(const Actor& actor, const NameOrId& instance,
                                                     const std::optional<NameOrId>& project);

  Result<std::vector<model::Sled>> SledList(const Actor& actor);
  Result<model::Sled> SledView(const Actor& actor, const Uuid& sled_id);
  // The instances on a sled with their project and silo names.
  struct SledInstance {
    model::Instance instance;
    std::string project_name;
    std::string silo_name;
  };
  Result<std::vector<SledInstance>> SledInstances(const Actor& actor, const Uuid& sled_id);

  // Polls sled agents every `period_ms` and records run-state changes.
  void StartWatcher(int period_ms);
  void StopWatcher();
  // Makes the watcher start its next pass now (no effect without a watcher). Thread-safe.
  void WakeWatcher();
  // One watcher pass (also used by tests and after operations): records run-state changes
  // reported by sleds, and removes VMs that sleds hold but the datastore does not place there.
  void WatchOnce();
  // Removes from every sled each VM, whatever its state (stopped included), that the datastore
  // does not place on that sled: the VM of a deleted or stopped instance, of an instance now
  // on another sled, or of no instance at all. A removal that fails is logged and tried again
  // on the next pass, so sleds converge once they answer.
  void ReapOrphans();
  // Makes the sled's port carry exactly the instance's settled attached addresses.
  void ReconcilePort(const model::Instance& instance, agents::SledAgentClient& sled,
                     const agents::SledInstance& vm);

 private:
  Result<model::Instance> RunStartSaga(const model::Instance& instance);
  Result<model::ExternalIp> RunAttachSaga(const saga::Json& params);
  Result<std::optional<model::ExternalIp>> RunDetachSaga(const saga::Json& params);
  Result<model::Instance> AfterSaga(const Uuid& instance_id, const saga::SagaOutcome& outcome);
  // The sled reported the VM stopped or failed: record it, drop its NAT, forget it on the sled.
  void SettleStopped(const model::Instance& instance, agents::SledAgentClient& sled,
                     const std::string& run_state);
  // Removes the VM of `instance_id` from the sled `sled_id` if the datastore, read now, does
  // not place it there (see ReapOrphans). Returns std::nullopt if it is not an orphan (or the
  // datastore could not say), else the sled's answer to the unregister.
  std::optional<Status> RemoveIfOrphan(const Uuid& sled_id, agents::SledAgentClient& sled,
                                       const Uuid& instance_id);

  db::Datastore& ds_;
  Projects& projects_;
  FloatingIps& floating_ips_;
  Dataplane& dataplane_;
  nat::NatReconciler& nat_;
  saga::SagaExecutor& exec_;
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool watch_stop_ = false;
  bool watch_now_ = false;  // guarded by watch_mu_
  std::thread watcher_;
};

}  // namespace fp::app
