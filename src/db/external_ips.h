#pragma once

// Floating IPs, and the pool an address request resolves to (external_ips.cc). Attaching
// external IPs to instances is in attach.h.

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "db/datastore.h"
#include "model/external_ips.h"
#include "model/page.h"

namespace fp::db {

Result<model::ExternalIp> FloatingIpCreate(Datastore& ds, const model::FloatingIpCreate& params);
Result<model::ExternalIp> FloatingIpLookupById(Datastore& ds, const Uuid& silo_id, const Uuid& id);
Result<model::ExternalIp> FloatingIpLookupByName(Datastore& ds, const Uuid& project_id,
                                                 const std::string& name);
Result<std::vector<model::ExternalIp>> FloatingIpList(Datastore& ds, const Uuid& project_id,
                                                      const model::PageRequest& page);
Result<model::ExternalIp> FloatingIpUpdate(Datastore& ds, const Uuid& id,
                                           const model::IdentityUpdate& update);
// Refused while attached (the message names the holder); the address returns to the pool.
Status FloatingIpDelete(Datastore& ds, const Uuid& id);

// Creates a floating IP inside the caller's transaction (FloatingIpCreate's body; also used to
// populate large pools in one transaction for benchmarks). `sync_point` may be empty.
Result<model::ExternalIp> FloatingIpCreateIn(
    Tx& tx, const model::FloatingIpCreate& params,
    const std::function<void(std::string_view)>& sync_point);

// The pool `selector` names for the silo: the silo's default unicast pool (of the selector's
// version), or an explicit unicast pool linked to the silo. NotFound / InvalidRequest worded
// as the API words them.
Result<Uuid> ResolvePoolIdIn(Tx& tx, const Uuid& silo_id, const model::PoolSelector& selector);

}  // namespace fp::db
