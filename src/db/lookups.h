#pragma once

// Lookups shared by the datastore's resource files, run inside a caller's transaction.

#include "db/datastore.h"

namespace fp::db {

// NotFound (by name or id, as selected) unless the silo is live.
Result<Silo> LookupSiloIn(Tx& tx, const NameOrId& selector);
// NotFound (by name or id, as selected) unless the pool is live.
Result<IpPool> LookupPoolIn(Tx& tx, const NameOrId& selector);

}  // namespace fp::db
