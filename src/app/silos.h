#pragma once

#include <vector>

#include "app/actor.h"
#include "app/request.h"
#include "common/error.h"
#include "common/name.h"
#include "model/ip_pools.h"
#include "model/page.h"
#include "model/quotas.h"
#include "model/silos.h"

namespace fp::db {
class Datastore;
}  // namespace fp::db

namespace fp::app {

class TokenCache;

// Silos, for fleet admins only: every method is Forbidden (403) for other roles, checked
// first. NotFound for a silo that does not exist; the datastore's errors otherwise.
// Thread-safe.
class Silos {
 public:
  // `tokens` is the cache authentication reads: a silo delete revokes the silo's tokens.
  Silos(db::Datastore& ds, TokenCache& tokens) : ds_(ds), tokens_(tokens) {}

  // ObjectAlreadyExists if the name is taken.
  Result<model::Silo> Create(const Request<model::Silo>& rq, model::SiloCreate params);
  Result<model::Silo> View(const Actor& actor, const NameOrId& silo);
  Result<std::vector<model::Silo>> List(const Actor& actor, const model::PageRequest& page);
  // Deletes the silo and revokes its tokens. InvalidRequest for the actor's own silo (the
  // request's token would go with it); the datastore's refusals (a silo with projects).
  Status Delete(const RequestContext& rq, const NameOrId& silo);
  // The silo's quotas, with the use of its IP quotas.
  Result<model::SiloQuotas> QuotasView(const Actor& actor, const NameOrId& silo);
  Result<std::vector<model::SiloQuotas>> QuotasList(const Actor& actor,
                                                    const model::PageRequest& page);
  // A limit lowered below use refuses new allocations and frees nothing.
  Result<model::SiloQuotas> QuotasUpdate(const Request<model::SiloQuotas>& rq, const NameOrId& silo,
                                         const model::SiloQuotasUpdate& update);
  // A silo's utilization (fleet admins), and the actor's own silo's (every role: only what
  // the silo holds, by kind, of the pools linked to it).
  Result<model::SiloUtilization> UtilizationView(const Actor& actor, const NameOrId& silo);
  Result<std::vector<model::SiloUtilization>> UtilizationList(const Actor& actor,
                                                              const model::PageRequest& page);
  Result<model::SiloUtilization> CurrentUtilization(const Actor& actor);
  // The IP pools linked to the silo.
  Result<std::vector<model::SiloIpPool>> PoolList(const Actor& actor, const NameOrId& silo,
                                                  const model::PageRequest& page);

 private:
  db::Datastore& ds_;
  TokenCache& tokens_;
};

}  // namespace fp::app
