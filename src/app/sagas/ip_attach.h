#pragma once

// Saga "ip_attach": live attach of a floating or ephemeral IP to an instance (omicron-
// behaviour.md §4.1-§4.3). begin (database: the IP becomes `attaching`, held by this saga, and
// its NAT row is written if the instance runs on a sled; an ephemeral IP is allocated first)
// -> dataplane (the switch is told and the sled's port gains the address; unlogged) ->
// complete (database: `attached`). With the saga row written in the first node's transaction
// and the dataplane node unlogged, an attach costs two durable commits.
//
// A move (allow_reassociation, a floating IP attached to another instance) is the same saga:
// begin takes the IP from the other instance and replaces its NAT row in one transaction;
// dataplane adds the address to the new port, syncs the switches (one change each), and
// removes it from the old port; its undo gives the IP back to the old instance if it can still
// take it, else leaves it detached.
//
// Nodes: begin -> dataplane -> complete. Outputs: IpBegun (begin), IpCompleted (complete).

#include <optional>
#include <vector>

#include "app/sagas/json.h"
#include "app/sagas/records.h"
#include "app/sagas/sagas.h"

namespace fp::app {

inline constexpr char kIpAttachSaga[] = "ip_attach";

struct IpAttachSagaParams {
  model::IpKind kind = model::IpKind::kFloating;  // kFloating or kEphemeral
  // The floating IP; for an ephemeral one, the id it is allocated under (chosen before the
  // saga), unless the instance already has an ephemeral IP of the version asked for.
  Uuid ip_id;
  Uuid instance_id;
  Uuid silo_id;  // the actor's silo: where an ephemeral IP's pool is resolved
  // Ephemeral only: SelectorOf(pool, ip_version).
  std::optional<NameOrId> pool;
  std::optional<IpVersion> ip_version;
  // Floating only: a floating IP attached to another instance moves from it in this saga.
  bool allow_reassociation = false;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(IpAttachSagaParams, kind, ip_id, instance_id,
                                                silo_id, pool, ip_version, allow_reassociation)

std::vector<saga::Node> IpAttachNodes();
saga::SagaDag IpAttachSaga(const IpAttachSagaParams& params);

void RegisterIpAttachActions(saga::ActionRegistry& registry, SagaDeps& deps);

}  // namespace fp::app
