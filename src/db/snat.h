#pragma once

// An instance's SNAT blocks: a quarter of an address (16,384 ports) from the silo's default
// pool, which its outbound traffic leaves through when it has no floating or ephemeral IP.
// Rows of external_ip of kind snat; ExternalIpReleaseIn (db/external_ips.h) gives them back.

#include <optional>

#include "common/ip.h"
#include "common/uuid.h"
#include "db/datastore.h"
#include "model/external_ips.h"

namespace fp::db {

// Allocates the instance's SNAT block (kind snat, attached) with id `snat_id` from the silo's
// default unicast pool of `version`: NotFound `default unicast IPv4 pool for current silo`
// without one. A re-run with the same id returns the same row.
Result<model::ExternalIp> SnatAllocateIn(Tx& tx, const Uuid& snat_id, const Uuid& instance_id,
                                         const Uuid& silo_id, IpVersion version = IpVersion::kV4);
// The same, or nothing (and nothing written) when the instance's IP quotas or the pool have no
// room for the block: a dual-stack instance's IPv6 SNAT, which its create does not ask for.
Result<std::optional<model::ExternalIp>> SnatAllocateIfRoomIn(Tx& tx, const Uuid& snat_id,
                                                              const Uuid& instance_id,
                                                              const Uuid& silo_id,
                                                              IpVersion version);
// Whether the silo has a default unicast pool of `version` (an IPv6 one gives dual-stack
// instances their IPv6 SNAT).
Result<bool> SiloHasDefaultPoolIn(Tx& tx, const Uuid& silo_id, IpVersion version);

}  // namespace fp::db
