#pragma once

// External addresses of every kind (SNAT blocks, ephemeral and floating IPs), their attach
// state, and how a floating IP asks for its address.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/ip.h"
#include "common/time.h"
#include "common/uuid.h"
#include "model/ip_pools.h"

namespace fp::model {

enum class IpKind { kSnat, kEphemeral, kFloating };
enum class AttachState { kDetached, kAttaching, kAttached, kDetaching };
std::string_view ToString(IpKind k);
std::string_view ToString(AttachState s);
// Inverses of the two above, for stored text; nullopt for text that is none of them (a caller
// reading it from storage reports corruption, never a default).
std::optional<IpKind> ParseIpKind(std::string_view text);
std::optional<AttachState> ParseAttachState(std::string_view text);

// An address (or a SNAT block of one) allocated from a pool, with who holds it: what an
// operator lists before removing a range (issue 25). The instance, project and silo are those
// of its holder: the instance it is attached to, and for a floating IP its project.
struct PoolAddress {
  Uuid external_ip_id;
  IpAddr ip;
  IpKind kind = IpKind::kFloating;
  int first_port = 0;
  int last_port = 65535;
  Uuid range_id;
  std::optional<std::string> name;  // a floating IP's
  std::optional<Uuid> instance_id;
  std::optional<std::string> instance_name;
  std::optional<Uuid> project_id;
  std::optional<std::string> project_name;
  std::optional<Uuid> silo_id;
  std::optional<std::string> silo_name;
  Timestamp time_created = 0;
};

// Which of a pool's addresses to list: all or one range's, in address (then first port)
// order, after `after` if set.
struct PoolAddressPage {
  std::optional<IpRange> range;
  std::optional<std::pair<IpAddr, int>> after;
  int64_t limit = 100;
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

  friend bool operator==(const ExternalIp&, const ExternalIp&) = default;
};

// How a floating IP gets its address (Oxide's AddressAllocator).
struct AddressRequest {
  std::optional<IpAddr> explicit_ip;  // set: reserve exactly this address, pool inferred
  PoolSelector selector;              // otherwise: lowest free address of the selected pool
};

struct FloatingIpCreate {
  Uuid id;
  Uuid silo_id;
  Uuid project_id;
  std::string name;
  std::string description;
  AddressRequest address;
};

}  // namespace fp::model
