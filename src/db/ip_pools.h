#pragma once

// IP pools, their ranges and their links to silos (ip_pools.cc).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/ip.h"
#include "common/name.h"
#include "db/datastore.h"
#include "model/ip_pools.h"
#include "model/page.h"
#include "model/silos.h"

namespace fp::db {

Result<model::IpPool> PoolCreate(Datastore& ds, const model::PoolCreate& params,
                                 const Effect<model::IpPool>& effect = {});
Result<model::IpPool> PoolLookup(Datastore& ds, const NameOrId& selector);
Result<std::vector<model::IpPool>> PoolList(Datastore& ds, const model::IpPoolFilter& filter,
                                            const model::PageRequest& page);
Result<model::IpPool> PoolUpdate(Datastore& ds, const Uuid& id, const model::IdentityUpdate& update,
                                 const Effect<model::IpPool>& effect = {});
Status PoolDelete(Datastore& ds, const Uuid& id, const Effect<void>& effect = {});

Result<std::vector<model::IpPoolRange>> RangeList(Datastore& ds, const Uuid& pool_id,
                                                  std::optional<IpAddr> after, int64_t limit);
Result<model::IpPoolRange> RangeAdd(Datastore& ds, const Uuid& pool_id, const Uuid& range_id,
                                    const IpRange& range,
                                    const Effect<model::IpPoolRange>& effect = {});
Status RangeRemove(Datastore& ds, const Uuid& pool_id, const IpRange& range,
                   const Effect<void>& effect = {});

Result<std::vector<model::SiloLink>> LinkList(Datastore& ds, const Uuid& pool_id,
                                              std::optional<Uuid> after, int64_t limit);
Result<model::SiloLink> Link(Datastore& ds, const Uuid& pool_id, const NameOrId& silo,
                             bool is_default, const Effect<model::SiloLink>& effect = {});
Result<model::SiloLink> LinkUpdate(Datastore& ds, const Uuid& pool_id, const Uuid& silo_id,
                                   bool is_default, const Effect<model::SiloLink>& effect = {});
// Removes the link. NotFound (`ip-pool-resource`) without one; InvalidRequest `IP addresses
// from this pool are in use in the linked silo (<holder> holds <ip>)` while a live address of
// the pool belongs to a live resource of the silo: a floating IP of one of its projects, or
// an instance's SNAT or ephemeral address. The check and the removal are one transaction.
Status Unlink(Datastore& ds, const Uuid& pool_id, const Uuid& silo_id,
              const Effect<void>& effect = {});
Result<model::PoolUtilization> Utilization(Datastore& ds, const Uuid& pool_id);
// The same inside a transaction, for a pool known to exist.
Result<model::PoolUtilization> PoolUtilizationIn(Tx& tx, const Uuid& pool_id);
// Every pool's capacity and the addresses allocated from it, by kind (an address holding
// several SNAT port blocks counts once), for /metrics.
struct PoolUsage {
  std::string name;
  std::string ip_version;  // "v4" or "v6"
  double capacity = 0;
  int64_t floating = 0;
  int64_t ephemeral = 0;
  int64_t snat = 0;
};
Result<std::vector<PoolUsage>> PoolUsageAll(Datastore& ds);

// The pools linked to a silo, as the silo sees them.
Result<std::vector<model::SiloIpPool>> SiloPoolList(Datastore& ds, const Uuid& silo_id,
                                                    const model::IpPoolFilter& filter,
                                                    const model::PageRequest& page);
Result<model::SiloIpPool> SiloPoolLookup(Datastore& ds, const Uuid& silo_id,
                                         const NameOrId& selector);

// NotFound (by name or id, as selected) unless the pool is live.
Result<model::IpPool> LookupPoolIn(Tx& tx, const NameOrId& selector);

// The name of the silo `silo_id` if the pool `selector` names is live but not linked to it (a
// pool a request of that silo may not take addresses from); nullopt otherwise (no such pool,
// or linked).
Result<std::optional<std::string>> PoolNotLinkedTo(Datastore& ds, const NameOrId& selector,
                                                   const Uuid& silo_id);

}  // namespace fp::db
