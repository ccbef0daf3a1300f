#include "app/ip_pools.h"

#include "db/ip_pools.h"
#include "db/silos.h"

namespace fp::app {

// --- System pools ---

Result<model::IpPool> IpPools::Create(const Actor& actor, model::PoolCreate params) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  params.id = Uuid::Random();
  return db::PoolCreate(ds_, params);
}

Result<model::IpPool> IpPools::View(const Actor& actor, const NameOrId& pool) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  return db::PoolLookup(ds_, pool);
}

Result<std::vector<model::IpPool>> IpPools::List(const Actor& actor,
                                                 const model::IpPoolFilter& filter,
                                                 const model::PageRequest& page) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  return db::PoolList(ds_, filter, page);
}

Result<model::IpPool> IpPools::Update(const Actor& actor, const NameOrId& pool,
                                      const model::IdentityUpdate& update) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  return db::PoolUpdate(ds_, p.id, update);
}

Status IpPools::Delete(const Actor& actor, const NameOrId& pool) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  return db::PoolDelete(ds_, p.id);
}

Result<model::PoolUtilization> IpPools::Utilization(const Actor& actor, const NameOrId& pool) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  return db::Utilization(ds_, p.id);
}

// --- Ranges ---

Result<std::vector<model::IpPoolRange>> IpPools::RangeList(const Actor& actor, const NameOrId& pool,
                                                           std::optional<IpAddr> after,
                                                           int64_t limit) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  return db::RangeList(ds_, p.id, after, limit);
}

Result<model::IpPoolRange> IpPools::RangeAdd(const Actor& actor, const NameOrId& pool,
                                             const IpRange& range) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  return db::RangeAdd(ds_, p.id, Uuid::Random(), range);
}

Status IpPools::RangeRemove(const Actor& actor, const NameOrId& pool, const IpRange& range) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  return db::RangeRemove(ds_, p.id, range);
}

// --- Links to silos ---

Result<std::vector<model::SiloLink>> IpPools::LinkList(const Actor& actor, const NameOrId& pool,
                                                       std::optional<Uuid> after, int64_t limit) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  return db::LinkList(ds_, p.id, after, limit);
}

Result<model::SiloLink> IpPools::Link(const Actor& actor, const NameOrId& pool,
                                      const NameOrId& silo, bool is_default) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  return db::Link(ds_, p.id, silo, is_default);
}

Result<model::SiloLink> IpPools::LinkUpdate(const Actor& actor, const NameOrId& pool,
                                            const NameOrId& silo, bool is_default) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  model::Silo s = FP_TRY(db::SiloLookup(ds_, silo));
  return db::LinkUpdate(ds_, p.id, s.id, is_default);
}

Status IpPools::Unlink(const Actor& actor, const NameOrId& pool, const NameOrId& silo) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  model::Silo s = FP_TRY(db::SiloLookup(ds_, silo));
  return db::Unlink(ds_, p.id, s.id);
}

// --- As the actor's silo sees them ---

Result<std::vector<model::SiloIpPool>> IpPools::SiloScopedList(const Actor& actor,
                                                               const model::IpPoolFilter& filter,
                                                               const model::PageRequest& page) {
  return db::SiloPoolList(ds_, actor.silo_id, filter, page);
}

Result<model::SiloIpPool> IpPools::SiloScopedView(const Actor& actor, const NameOrId& pool) {
  return db::SiloPoolLookup(ds_, actor.silo_id, pool);
}

}  // namespace fp::app
