#pragma once

// Silos (silos.cc).

#include <vector>

#include "common/name.h"
#include "db/datastore.h"
#include "model/page.h"
#include "model/silos.h"

namespace fp::db {

Result<model::Silo> SiloCreate(Datastore& ds, const model::SiloCreate& params,
                               const Effect<model::Silo>& effect = {});
Result<model::Silo> SiloLookup(Datastore& ds, const NameOrId& selector);
Result<std::vector<model::Silo>> SiloList(Datastore& ds, const model::PageRequest& page);
// Refused while the silo has live projects (the message names one). The silo's tokens stop
// authenticating when it commits (a cache of them must be emptied: app/token_cache.h).
Status SiloDelete(Datastore& ds, const Uuid& id, const Effect<void>& effect = {});

// NotFound (by name or id, as selected) unless the silo is live.
Result<model::Silo> LookupSiloIn(Tx& tx, const NameOrId& selector);

}  // namespace fp::db
