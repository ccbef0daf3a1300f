#include "app/silos.h"

#include <fmt/format.h>

#include "app/token_cache.h"
#include "db/ip_pools.h"
#include "db/request_effect.h"
#include "db/silos.h"

namespace fp::app {

Result<model::Silo> Silos::Create(const Request<model::Silo>& rq, model::SiloCreate params) {
  const Actor& actor = rq.actor;
  FP_CHECK_OK(RequireFleetAdmin(actor));
  params.id = Uuid::Random();
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

Result<std::vector<model::SiloIpPool>> Silos::PoolList(const Actor& actor, const NameOrId& silo,
                                                       const model::PageRequest& page) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::Silo s = FP_TRY(db::SiloLookup(ds_, silo));
  return db::SiloPoolList(ds_, s.id, {}, page);
}

}  // namespace fp::app
