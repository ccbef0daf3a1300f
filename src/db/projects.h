#pragma once

// Projects (projects.cc).

#include <string>
#include <vector>

#include "common/name.h"
#include "db/datastore.h"
#include "model/page.h"
#include "model/silos.h"

namespace fp::db {

Result<model::Project> ProjectCreate(Datastore& ds, const Uuid& id, const Uuid& silo_id,
                                     const std::string& name, const std::string& description,
                                     const Effect<model::Project>& effect = {});
Result<model::Project> ProjectLookup(Reader ds, const Uuid& silo_id, const NameOrId& selector);
Result<std::vector<model::Project>> ProjectList(Datastore& ds, const Uuid& silo_id,
                                                const model::PageRequest& page);
Result<model::Project> ProjectUpdate(Datastore& ds, const Uuid& id,
                                     const model::IdentityUpdate& update,
                                     const Effect<model::Project>& effect = {});
// Refused while the project holds floating IPs (the message names one).
Status ProjectDelete(Datastore& ds, const Uuid& id, const Effect<void>& effect = {});

}  // namespace fp::db
