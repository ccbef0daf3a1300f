#pragma once

// The sagas of app/, one file each under app/sagas/ holding its typed parameters and node
// outputs, its DAG and its actions:
//
//   instance_create.h   "instance_create"   record, SNAT, one node per requested external IP
//   instance_start.h    "instance_start"    place on a sled, NAT rows, the sled, the switch
//   instance_migrate.h  "instance_migrate"  mark, destination VM, move, switch, source VM
//   instance_delete.h   "instance_delete"   one transaction
//   ip_attach.h         "ip_attach"         live attach of a floating or ephemeral IP
//   ip_detach.h         "ip_detach"         live detach
//
// The saga's name is the `name` of each saga the log holds, and each node's action name is
// "<saga>.<node>": both are part of the log's format, as are the parameters' and outputs'
// JSON keys (app/sagas/json.h). Stop and reboot are no sagas: one call to the sled each.

#include <string>
#include <vector>

#include "saga/saga.h"

namespace fp::db {
class Datastore;
class Tx;
}  // namespace fp::db

namespace fp::loops {
class NatReconciler;
struct SledAgents;
}  // namespace fp::loops

namespace fp::app {

// What the saga actions need; lives as long as the executor.
struct SagaDeps {
  db::Datastore& ds;
  loops::SledAgents& sled_agents;
  loops::NatReconciler& nat;
};

// A saga action function over the datastore's transaction, as a callable object: the engine's
// TxFunction takes lambdas and function objects, and a named function reads better than a
// lambda in a registration (`.run_in_tx = InTx<Record>`).
template <auto F>
inline constexpr auto InTx = [](db::Tx& tx, const saga::ActionContext& ctx) { return F(tx, ctx); };

// The names of every saga above.
std::vector<std::string> SagaNames();

// Registers the actions of every saga above. Once, at start-up, before the executor runs.
void RegisterSagaActions(saga::ActionRegistry& registry, SagaDeps& deps);

}  // namespace fp::app
