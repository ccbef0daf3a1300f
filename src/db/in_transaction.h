#pragma once

// Operations shared by the datastore's resource files, run inside a caller's transaction.

#include "db/datastore.h"

namespace fp::db {

// NotFound (by name or id, as selected) unless the silo is live.
Result<Silo> LookupSiloIn(Tx& tx, const NameOrId& selector);
// NotFound (by name or id, as selected) unless the pool is live.
Result<IpPool> LookupPoolIn(Tx& tx, const NameOrId& selector);

// Creates a floating IP inside the caller's transaction (Datastore::FloatingIpCreate's body;
// also used to populate large pools in one transaction for benchmarks). `sync_point` may be
// empty.
Result<ExternalIp> FloatingIpCreateIn(Tx& tx, const FloatingIpCreate& params,
                                      const std::function<void(std::string_view)>& sync_point);

// The pool `selector` names for the silo: the silo's default unicast pool (of the selector's
// version), or an explicit unicast pool linked to the silo. NotFound / InvalidRequest worded
// as the API words them.
Result<Uuid> ResolvePoolIdIn(Tx& tx, const Uuid& silo_id, const PoolSelector& selector);

// Adds `n` to the counter `name` (created at 0 if absent), in table counter.
Status CounterAddIn(Tx& tx, std::string_view name, int64_t n);
// The counter's value; 0 if absent.
Result<int64_t> CounterValueIn(Tx& tx, std::string_view name);

}  // namespace fp::db
