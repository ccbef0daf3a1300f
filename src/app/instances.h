#pragma once

// Instances on sleds: create, start, stop, reboot, migrate and delete, of which create, start,
// migrate and delete run as sagas (app/sagas/), and the live attach and
// detach of their external IPs (instance_external_ips.cc), which run as sagas too. The
// instance's run state follows its sled agent (loops/sled_watcher.h).

#include <optional>
#include <string>
#include <vector>

#include "app/actor.h"
#include "app/floating_ips.h"
#include "app/projects.h"
#include "app/request.h"
#include "app/sagas/ip_attach.h"
#include "app/sagas/ip_detach.h"
#include "model/external_ips.h"
#include "model/instances.h"
#include "model/ip_pools.h"
#include "model/page.h"
#include "saga/saga.h"

namespace fp::db {
class Datastore;
class DeferredDurability;
}  // namespace fp::db

namespace fp::loops {
class NatReconciler;
class SledWatcher;
struct SledAgents;
}  // namespace fp::loops

namespace fp::app {

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
  // Outbound SNAT blocks (floatplane's `snat`): IPv4 for an IPv4 interface, IPv6 too for a
  // dual-stack one when the silo has a default IPv6 pool.
  bool snat = true;
};

// The instances service: lookups, the operations, and the sagas that carry them out (each
// operation runs its saga to rest on the caller's thread). Each method takes the acting token
// first; NotFound covers instances that are absent or in another silo. Thread-safe (the
// datastore and the saga executor are; the service holds no state of its own).
class Instances {
 public:
  // The references must outlive the service. `projects` and `floating_ips` resolve the API's
  // selectors as those services do; `watcher` is woken after a delete.
  Instances(db::Datastore& ds, Projects& projects, FloatingIps& floating_ips,
            loops::SledAgents& sled_agents, loops::NatReconciler& nat, saga::SagaExecutor& executor,
            loops::SledWatcher& watcher)
      : ds_(ds),
        projects_(projects),
        floating_ips_(floating_ips),
        sled_agents_(sled_agents),
        nat_(nat),
        exec_(executor),
        watcher_(watcher) {}

  // Errors, in order: NotFound for the project, Forbidden without write access, those of
  // CheckInstanceSize, then those of resolving the requested floating IPs and of the saga.
  Result<model::Instance> Create(const RequestContext& rq, const NameOrId& project,
                                 const InstanceCreateParams& params);
  // `project` is required with a name and forbidden with an id (§2.0). `deferred`: a request's
  // checks leave the wait for durability to that scope (db::Reader).
  Result<model::Instance> Lookup(const Actor& actor, const NameOrId& instance,
                                 const std::optional<NameOrId>& project,
                                 db::DeferredDurability* deferred = nullptr);
  Result<std::vector<model::Instance>> List(const Actor& actor, const NameOrId& project,
                                            const model::PageRequest& page);
  // Sets ncpus and memory of a stopped instance. Errors, in order: those of Lookup,
  // Forbidden without write access, those of CheckInstanceSize, InvalidRequest unless stopped.
  Result<model::Instance> Update(const Request<model::Instance>& rq, const NameOrId& instance,
                                 const std::optional<NameOrId>& project, const InstanceSize& size);
  Status Delete(const RequestContext& rq, const NameOrId& instance,
                const std::optional<NameOrId>& project);
  Result<model::Instance> Start(const Request<model::Instance>& rq, const NameOrId& instance,
                                const std::optional<NameOrId>& project);
  Result<model::Instance> Stop(const Request<model::Instance>& rq, const NameOrId& instance,
                               const std::optional<NameOrId>& project);
  Result<model::Instance> Reboot(const Request<model::Instance>& rq, const NameOrId& instance,
                                 const std::optional<NameOrId>& project);
  // Fleet admin only (Forbidden otherwise, before any lookup). An instance given by id is
  // found in any silo; by name, in `project` of the token's silo.
  Result<model::Instance> Migrate(const RequestContext& rq, const NameOrId& instance,
                                  const std::optional<NameOrId>& project, const Uuid& dst_sled);

  // Live attach and detach (instance_external_ips.cc). Floating attach/detach answer with the
  // floating IP; ephemeral attach with the ephemeral IP. `fip_project` scopes a floating IP name.
  // With `allow_reassociation`, a floating IP attached to another instance moves from it in the
  // same saga (db::BeginAttachIn); without, that is a 400 naming the holder.
  Result<model::ExternalIp> AttachFloating(const RequestContext& rq, const NameOrId& fip,
                                           const std::optional<NameOrId>& fip_project,
                                           const NameOrId& instance,
                                           bool allow_reassociation = false);
  Result<model::ExternalIp> DetachFloating(const RequestContext& rq, const NameOrId& fip,
                                           const std::optional<NameOrId>& fip_project);
  Result<model::ExternalIp> AttachEphemeral(const RequestContext& rq, const NameOrId& instance,
                                            const std::optional<NameOrId>& project,
                                            const model::PoolSelector& selector);
  Status DetachEphemeral(const RequestContext& rq, const NameOrId& instance,
                         const std::optional<NameOrId>& project, std::optional<IpVersion> version);
  // The instance an instance saga answers with, from the saga's parameters and last output:
  // an Idempotency-Key's replay of the request. A create without start answers the row its
  // last node committed; any other (a create that also starts the instance, a start, a
  // migrate) the instance now, as the request itself reads it after its saga, or the create's
  // row if the instance was deleted since. A create that asked for a start that never began
  // (its run state unchanged since the create saga) runs that start first, as the request
  // would have: errors then are the start's.
  Result<model::Instance> InstanceOfSaga(const RequestContext& rq, const saga::Json& params,
                                         const saga::Json& output);
  // The IP an attach or detach saga answered with, from the saga's output (the row as its
  // complete node committed it): an Idempotency-Key's replay of that request.
  Result<model::ExternalIp> IpOfSagaOutput(const saga::Json& output);
  // The instance's attached external IPs (SNAT, ephemeral, floating).
  Result<std::vector<model::ExternalIp>> ExternalIps(const Actor& actor, const NameOrId& instance,
                                                     const std::optional<NameOrId>& project);

 private:
  Result<model::Instance> RunStartSaga(const RequestContext& rq, const model::Instance& instance);
  // `check`, if given, runs in the transaction that would create the saga (saga::CreateCheck).
  Result<model::ExternalIp> RunAttachSaga(const RequestContext& rq,
                                          const IpAttachSagaParams& params,
                                          const saga::CreateCheck* check = nullptr);
  Result<model::ExternalIp> RunDetachSaga(const RequestContext& rq,
                                          const IpDetachSagaParams& params,
                                          const saga::CreateCheck* check = nullptr);
  Result<model::Instance> AfterSaga(const Uuid& instance_id, const saga::SagaOutcome& outcome);

  db::Datastore& ds_;
  Projects& projects_;
  FloatingIps& floating_ips_;
  loops::SledAgents& sled_agents_;
  loops::NatReconciler& nat_;
  saga::SagaExecutor& exec_;
  loops::SledWatcher& watcher_;
};

}  // namespace fp::app
