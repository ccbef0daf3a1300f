#pragma once

// Plain values read from and written to the datastore. Names and descriptions have been
// validated by the caller; the datastore enforces uniqueness and referential rules.

#include <optional>
#include <string>
#include <vector>

#include "common/ip.h"
#include "common/time.h"
#include "common/uuid.h"

namespace fp::db {

enum class Role { kFleetAdmin, kSiloAdmin, kSiloCollaborator, kSiloViewer };
std::string_view ToString(Role r);
std::optional<Role> ParseRole(std::string_view text);

enum class PoolType { kUnicast, kMulticast };
enum class PoolAssignment { kSilos, kSystemServices };
std::string_view ToString(PoolType t);
std::string_view ToString(PoolAssignment a);
std::optional<PoolType> ParsePoolType(std::string_view text);
std::optional<PoolAssignment> ParsePoolAssignment(std::string_view text);

enum class IpKind { kSnat, kEphemeral, kFloating };
enum class AttachState { kDetached, kAttaching, kAttached, kDetaching };
std::string_view ToString(IpKind k);
std::string_view ToString(AttachState s);
// Inverses of the two above, for stored text (unknown text reads as floating / detached).
IpKind ParseIpKind(std::string_view text);
AttachState ParseAttachState(std::string_view text);

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

struct Project {
  Uuid id;
  Uuid silo_id;
  std::string name;
  std::string description;
  Timestamp time_created = 0;
  Timestamp time_modified = 0;
};

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

struct ExternalIp {
  Uuid id;
  std::optional<std::string> name;         // floating only
  std::optional<std::string> description;  // floating only
  Uuid pool_id;
  Uuid range_id;
  std::optional<Uuid> parent_id;
  IpKind kind = IpKind::kFloating;
  IpAddr ip;
  int first_port = 0;
  int last_port = 65535;
  std::optional<Uuid> project_id;  // floating only
  AttachState state = AttachState::kDetached;
  Timestamp time_created = 0;
  Timestamp time_modified = 0;
};

struct Token {
  Uuid id;
  Uuid silo_id;
  Role role = Role::kSiloViewer;
  std::string name;
};

// How a list is ordered, and where the previous page ended.
enum class SortOrder { kNameAscending, kNameDescending, kIdAscending };
struct PageRequest {
  SortOrder order = SortOrder::kNameAscending;
  std::optional<std::string> after;  // the sort key of the last item already returned
  int64_t limit = 100;
};

}  // namespace fp::db
