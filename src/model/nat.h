#pragma once

// One row of the NAT table: traffic for `external_ip` ports [first_port, last_port] goes to
// the instance's port on the sled at `sled_address`. Rows are versioned: a row is live from
// version_added until version_removed (omicron-behaviour.md §5).

#include <cstdint>
#include <optional>
#include <string>

#include "common/ip.h"
#include "common/uuid.h"

namespace fp::model {

struct NatEntry {
  Uuid id;
  IpAddr external_ip;
  int first_port = 0;
  int last_port = 65535;
  IpAddr sled_address;
  int64_t vni = 0;
  std::string mac;
  Uuid instance_id;
  int64_t version_added = 0;
  std::optional<int64_t> version_removed;
};

}  // namespace fp::model
