#pragma once

// IP pools, their ranges and their links to silos, and how a request selects a pool.

#include <optional>
#include <string>
#include <string_view>

#include "common/ip.h"
#include "common/name.h"
#include "common/time.h"
#include "common/uuid.h"

namespace fp::model {

enum class PoolType { kUnicast, kMulticast };
enum class PoolAssignment { kSilos, kSystemServices };
std::string_view ToString(PoolType t);
std::string_view ToString(PoolAssignment a);
std::optional<PoolType> ParsePoolType(std::string_view text);
std::optional<PoolAssignment> ParsePoolAssignment(std::string_view text);

struct IpPool {
  Uuid id;
  std::string name;
  std::string description;
  IpVersion ip_version = IpVersion::kV4;
  PoolType pool_type = PoolType::kUnicast;
  PoolAssignment assignment = PoolAssignment::kSilos;
  Timestamp time_created = 0;
  Timestamp time_modified = 0;
};

struct PoolCreate {
  Uuid id;
  std::string name;
  std::string description;
  IpVersion ip_version = IpVersion::kV4;
  PoolType pool_type = PoolType::kUnicast;
  PoolAssignment assignment = PoolAssignment::kSilos;
};

struct IpPoolFilter {
  std::optional<IpVersion> ip_version;
  std::optional<PoolType> pool_type;
  std::optional<PoolAssignment> assignment;
};

struct IpPoolRange {
  Uuid id;
  Uuid pool_id;
  IpRange range;
  Timestamp time_created = 0;
};

struct SiloLink {
  Uuid pool_id;
  Uuid silo_id;
  bool is_default = false;
};

// An IP pool as seen from a silo it is linked to.
struct SiloIpPool {
  IpPool pool;
  bool is_default = false;
};

struct PoolUtilization {
  double capacity = 0;
  double remaining = 0;
};

// Where an automatically allocated address comes from.
struct PoolSelector {
  enum class Mode { kDefault, kExplicitPool };
  Mode mode = Mode::kDefault;
  std::optional<IpVersion> ip_version;  // kDefault only
  std::optional<NameOrId> pool;         // kExplicitPool only
};

}  // namespace fp::model
