#pragma once

// Puts right the external addresses on a running VM's port, which can drift from the datastore
// when a sled applies an attach or detach call after its saga gave up on it.

#include <vector>

#include "agents/agents.h"
#include "model/external_ips.h"
#include "model/instances.h"

namespace fp::db {
class Datastore;
}  // namespace fp::db

namespace fp::loops {

// Makes the sled's port of `instance` carry exactly the instance's settled attached addresses
// (SNAT aside): removes an address no attached or moving IP holds, restores an attached one
// the port lacks. An address an attach or detach saga is still moving is left alone. `vm` must
// have been read from the sled before this call reads the datastore. Best effort: failures are
// logged and the next watcher pass tries again. Thread-safe.
void ReconcilePort(db::Datastore& ds, const model::Instance& instance,
                   agents::SledAgentClient& sled, const agents::SledInstance& vm);
// The same with the instance's external IPs already read (after `vm` was read from the sled).
// ReconcilePort changes nothing exactly when PortAgrees.
void ReconcilePort(const model::Instance& instance, const std::vector<model::ExternalIp>& ips,
                   agents::SledAgentClient& sled, const agents::SledInstance& vm);

// Whether the port `vm` needs no repair against `ips`: every attached address is on it, and
// every address on it (SNAT aside) is attached or being moved by a saga.
bool PortAgrees(const std::vector<model::ExternalIp>& ips, const agents::SledInstance& vm);

}  // namespace fp::loops
