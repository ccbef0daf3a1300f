#pragma once

// Utilization of a silo (utilization.cc): Oxide's provisioned CPUs and memory, its quotas, and
// what it holds of each pool linked to it, by kind.

#include <vector>

#include "db/datastore.h"
#include "model/page.h"
#include "model/quotas.h"

namespace fp::db {

// NotFound for a silo that is not live.
Result<model::SiloUtilization> SiloUtilizationView(Datastore& ds, const Uuid& silo_id);
// Live silos, by name or id as `page` says.
Result<std::vector<model::SiloUtilization>> SiloUtilizationList(Datastore& ds,
                                                                const model::PageRequest& page);

}  // namespace fp::db
