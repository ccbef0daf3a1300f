#include "app/ip_pools.h"

#include <fmt/format.h>

#include "db/ip_pools.h"
#include "db/pool_addresses.h"
#include "db/request_effect.h"
#include "db/silos.h"

namespace fp::app {

// --- System pools ---

Result<model::IpPool> IpPools::Create(const Request<model::IpPool>& rq, model::PoolCreate params) {
  const Actor& actor = rq.actor;
  FP_CHECK_OK(RequireFleetAdmin(actor));
  params.id = ds_.random().NewUuid();
  return db::PoolCreate(ds_, params, db::EffectOf<model::IpPool>(rq));
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

Result<model::IpPool> IpPools::Update(const Request<model::IpPool>& rq, const NameOrId& pool,
                                      const model::IdentityUpdate& update) {
  const Actor& actor = rq.actor;
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  return db::PoolUpdate(ds_, p.id, update, db::EffectOf<model::IpPool>(rq));
}

Status IpPools::Delete(const RequestContext& rq, const NameOrId& pool) {
  const Actor& actor = rq.actor;
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  return db::PoolDelete(ds_, p.id, db::EffectOfNoContent(rq));
}

Result<model::PoolUtilization> IpPools::Utilization(const Actor& actor, const NameOrId& pool) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  return db::Utilization(ds_, p.id);
}

// --- Ranges ---

Result<std::vector<model::PoolAddress>> IpPools::AddressList(const Actor& actor,
                                                             const NameOrId& pool,
                                                             const model::PoolAddressPage& page) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  return db::PoolAddresses(ds_, p.id, page);
}

Result<std::vector<model::IpPoolRange>> IpPools::RangeList(const Actor& actor, const NameOrId& pool,
                                                           std::optional<IpAddr> after,
                                                           int64_t limit) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  return db::RangeList(ds_, p.id, after, limit);
}

Result<model::IpPoolRange> IpPools::RangeAdd(const Request<model::IpPoolRange>& rq,
                                             const NameOrId& pool, const IpRange& range) {
  const Actor& actor = rq.actor;
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  return db::RangeAdd(ds_, p.id, ds_.random().NewUuid(), range,
                      db::EffectOf<model::IpPoolRange>(rq));
}

Status IpPools::RangeRemove(const RequestContext& rq, const NameOrId& pool, const IpRange& range) {
  const Actor& actor = rq.actor;
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  return db::RangeRemove(ds_, p.id, range, db::EffectOfNoContent(rq));
}

// --- Links to silos ---

Result<std::vector<model::SiloLink>> IpPools::LinkList(const Actor& actor, const NameOrId& pool,
                                                       std::optional<Uuid> after, int64_t limit) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  return db::LinkList(ds_, p.id, after, limit);
}

Result<model::SiloLink> IpPools::Link(const Request<model::SiloLink>& rq, const NameOrId& pool,
                                      const NameOrId& silo, bool is_default) {
  const Actor& actor = rq.actor;
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  return db::Link(ds_, p.id, silo, is_default, db::EffectOf<model::SiloLink>(rq));
}

Result<model::SiloLink> IpPools::LinkUpdate(const Request<model::SiloLink>& rq,
                                            const NameOrId& pool, const NameOrId& silo,
                                            bool is_default) {
  const Actor& actor = rq.actor;
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  model::Silo s = FP_TRY(db::SiloLookup(ds_, silo));
  return db::LinkUpdate(ds_, p.id, s.id, is_default, db::EffectOf<model::SiloLink>(rq));
}

Status IpPools::Unlink(const RequestContext& rq, const NameOrId& pool, const NameOrId& silo) {
  const Actor& actor = rq.actor;
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  model::Silo s = FP_TRY(db::SiloLookup(ds_, silo));
  return db::Unlink(ds_, p.id, s.id, db::EffectOfNoContent(rq));
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

Error ExplainUnlinkedPool(db::Datastore& ds, const Actor& actor,
                          const model::PoolSelector& selector, Error error) {
  if (error.kind() != ErrorKind::kNotFound || !actor.is_fleet_admin() ||
      selector.mode != model::PoolSelector::Mode::kExplicitPool || !selector.pool ||
      error.message().rfind("not found: ip-pool with", 0) != 0) {
    return error;
  }
  auto silo = db::PoolNotLinkedTo(ds, *selector.pool, actor.silo_id);
  if (!silo || !*silo) return error;
  const std::string pool =
      selector.pool->is_id() ? selector.pool->id().ToString() : selector.pool->name().str();
  return Error::NotFound(
      fmt::format("{} (it exists, but is not linked to silo \"{}\": link it with POST "
                  "/v1/system/ip-pools/{}/silos)",
                  error.message().substr(std::string_view("not found: ").size()), **silo, pool));
}

}  // namespace fp::app
