#pragma once

// Silos (tenants) and the projects inside them. Names and descriptions have been validated by
// the caller; the datastore enforces uniqueness and referential rules.

#include <cstdint>
#include <optional>
#include <string>

#include "common/time.h"
#include "common/uuid.h"

namespace fp::model {

struct Silo {
  Uuid id;
  std::string name;
  std::string description;
  bool discoverable = true;
  std::string identity_mode;
  std::optional<std::string> admin_group_name;
  Timestamp time_created = 0;
  Timestamp time_modified = 0;
};

struct SiloCreate {
  Uuid id;
  std::string name;
  std::string description;
  bool discoverable = true;
  std::string identity_mode = "local_only";
  std::optional<std::string> admin_group_name;
  // Oxide's SiloQuotasCreate: recorded, shown by the quota views, not enforced.
  int64_t cpus_quota = 0;
  int64_t memory_quota = 0;
  int64_t storage_quota = 0;
};

struct Project {
  Uuid id;
  Uuid silo_id;
  std::string name;
  std::string description;
  Timestamp time_created = 0;
  Timestamp time_modified = 0;
};

// Optional field updates (name, description); absent fields are left unchanged.
struct IdentityUpdate {
  std::optional<std::string> name;
  std::optional<std::string> description;
};

}  // namespace fp::model
