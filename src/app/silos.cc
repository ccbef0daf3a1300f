#include "app/silos.h"

#include <fmt/format.h>

#include "app/token_cache.h"
#include "db/ip_pools.h"
#include "db/quotas.h"
#include "db/request_effect.h"
#include "db/silos.h"
#include "db/utilization.h"

namespace fp::app {

Result<model::Silo> Silos::Create(const Request<model::Silo>& rq, model::SiloCreate params) {
  const Actor& actor = rq.actor;
  FP_CHECK_OK(RequireFleetAdmin(actor));
  params.id = ds_.random().NewUuid();
  return db::SiloCreate(ds_, params, db::EffectOf<model::Silo>(rq));
}

Result<model::Silo> Silos::View(const Actor& actor, const NameOrId& silo) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  return db::SiloLookup(ds_, silo);
}

Result<std::vector<model::Silo>> Silos::List(const Actor& actor, const model::PageRequest& page) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  return db::SiloList(ds_, page);
}

Status Silos::Delete(const RequestContext& rq, const NameOrId& silo) {
  const Actor& actor = rq.actor;
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::Silo s = FP_TRY(db::SiloLookup(ds_, silo));
  if (s.id == actor.silo_id) {
    return Fail(Error::InvalidRequest(fmt::format(
        "silo \"{}\" holds the token making this request and cannot be deleted with it", s.name)));
  }
  Status deleted = db::SiloDelete(ds_, s.id, db::EffectOfNoContent(rq));
  tokens_.Invalidate();  // the silo's tokens are revoked
  return deleted;
}

Result<model::SiloQuotas> Silos::QuotasView(const Actor& actor, const NameOrId& silo) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::Silo s = FP_TRY(db::SiloLookup(ds_, silo));
  return db::SiloQuotasView(ds_, s.id);
}

Result<std::vector<model::SiloQuotas>> Silos::QuotasList(const Actor& actor,
                                                         const model::PageRequest& page) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  return db::SiloQuotasList(ds_, page);
}

Result<model::SiloQuotas> Silos::QuotasUpdate(const Request<model::SiloQuotas>& rq,
                                              const NameOrId& silo,
                                              const model::SiloQuotasUpdate& update) {
  FP_CHECK_OK(RequireFleetAdmin(rq.actor));
  model::Silo s = FP_TRY(db::SiloLookup(ds_, silo));
  return db::SiloQuotasUpdate(ds_, s.id, update, db::EffectOf<model::SiloQuotas>(rq));
}

Result<model::SiloUtilization> Silos::UtilizationView(const Actor& actor, const NameOrId& silo) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::Silo s = FP_TRY(db::SiloLookup(ds_, silo));
  return db::SiloUtilizationView(ds_, s.id);
}

Result<std::vector<model::SiloUtilization>> Silos::UtilizationList(const Actor& actor,
                                                                   const model::PageRequest& page) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  return db::SiloUtilizationList(ds_, page);
}

Result<model::SiloUtilization> Silos::CurrentUtilization(const Actor& actor) {
  return db::SiloUtilizationView(ds_, actor.silo_id);
}

Result<std::vector<model::SiloIpPool>> Silos::PoolList(const Actor& actor, const NameOrId& silo,
                                                       const model::PageRequest& page) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::Silo s = FP_TRY(db::SiloLookup(ds_, silo));
  return db::SiloPoolList(ds_, s.id, {}, page);
}

}  // namespace fp::app
