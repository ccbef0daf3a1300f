#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "app/actor.h"
#include "app/request.h"
#include "common/error.h"
#include "common/ip.h"
#include "common/name.h"
#include "model/external_ips.h"
#include "model/ip_pools.h"
#include "model/page.h"
#include "model/silos.h"

namespace fp::db {
class Datastore;
}  // namespace fp::db

namespace fp::app {

// IP pools: the system's (pools, their ranges, their links to silos, their utilization; fleet
// admin only, Forbidden (403) for other roles, checked first) and the pools as the actor's
// silo sees them (the linked ones; any role). NotFound for a pool or silo that does not exist
// (or, seen from a silo, is not linked to it); the datastore's errors otherwise. Thread-safe.
class IpPools {
 public:
  explicit IpPools(db::Datastore& ds) : ds_(ds) {}

  // --- System pools ---
  Result<model::IpPool> Create(const Request<model::IpPool>& rq, model::PoolCreate params);
  Result<model::IpPool> View(const Actor& actor, const NameOrId& pool);
  Result<std::vector<model::IpPool>> List(const Actor& actor, const model::IpPoolFilter& filter,
                                          const model::PageRequest& page);
  Result<model::IpPool> Update(const Request<model::IpPool>& rq, const NameOrId& pool,
                               const model::IdentityUpdate& update);
  Status Delete(const RequestContext& rq, const NameOrId& pool);
  Result<model::PoolUtilization> Utilization(const Actor& actor, const NameOrId& pool);

  // --- Ranges (ordered by first address; `after` is the last one of the previous page) ---
  Result<std::vector<model::IpPoolRange>> RangeList(const Actor& actor, const NameOrId& pool,
                                                    std::optional<IpAddr> after, int64_t limit);
  Result<model::IpPoolRange> RangeAdd(const Request<model::IpPoolRange>& rq, const NameOrId& pool,
                                      const IpRange& range);
  Status RangeRemove(const RequestContext& rq, const NameOrId& pool, const IpRange& range);
  // The addresses allocated from a pool (or one of its ranges) and who holds them (fleet
  // admin): what must be freed before a range can go.
  Result<std::vector<model::PoolAddress>> AddressList(const Actor& actor, const NameOrId& pool,
                                                      const model::PoolAddressPage& page);

  // --- Links to silos (ordered by silo id; `after` as for ranges) ---
  Result<std::vector<model::SiloLink>> LinkList(const Actor& actor, const NameOrId& pool,
                                                std::optional<Uuid> after, int64_t limit);
  Result<model::SiloLink> Link(const Request<model::SiloLink>& rq, const NameOrId& pool,
                               const NameOrId& silo, bool is_default);
  Result<model::SiloLink> LinkUpdate(const Request<model::SiloLink>& rq, const NameOrId& pool,
                                     const NameOrId& silo, bool is_default);
  Status Unlink(const RequestContext& rq, const NameOrId& pool, const NameOrId& silo);

  // --- As the actor's silo sees them ---
  Result<std::vector<model::SiloIpPool>> SiloScopedList(const Actor& actor,
                                                        const model::IpPoolFilter& filter,
                                                        const model::PageRequest& page);
  Result<model::SiloIpPool> SiloScopedView(const Actor& actor, const NameOrId& pool);

 private:
  db::Datastore& ds_;
};

// `error`, of a request that named a pool explicitly (`selector`), told to a fleet admin with
// what to do when it is that pool's NotFound and the pool exists but is not linked to the
// admin's silo. Everyone else is told, as Oxide tells them, that it is not found: pools not
// linked to a silo are not its users' to see.
Error ExplainUnlinkedPool(db::Datastore& ds, const Actor& actor,
                          const model::PoolSelector& selector, Error error);

}  // namespace fp::app
