#pragma once

// Reads of the datastore a simulation's workload makes to choose and judge its steps (not the
// server's: a client would learn the same from the API).

#include <optional>
#include <string>
#include <utility>

#include "common/uuid.h"
#include "db/datastore.h"

namespace fp::sim {

// Whether the floating IP named `fip` is attached to an instance other than `instance` now.
bool AttachedElsewhere(db::Datastore& ds, const std::string& fip, const std::string& instance);

// The ids of the live floating IP `fip` and instance `instance`, if both exist.
std::optional<std::pair<Uuid, Uuid>> FloatingIpAndInstanceIds(db::Datastore& ds,
                                                              const std::string& fip,
                                                              const std::string& instance);

}  // namespace fp::sim
