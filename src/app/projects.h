#pragma once

#include <string>
#include <vector>

#include "app/actor.h"
#include "app/request.h"
#include "common/error.h"
#include "common/name.h"
#include "model/page.h"
#include "model/quotas.h"
#include "model/silos.h"

namespace fp::db {
class Datastore;
class DeferredDurability;
}  // namespace fp::db

namespace fp::app {

// The projects of the actor's silo. Every role reads them; changing them needs RequireWrite
// (Forbidden, 403), checked after the project's lookup. NotFound for a project that is absent
// or in another silo; the datastore's errors otherwise. Thread-safe.
class Projects {
 public:
  explicit Projects(db::Datastore& ds) : ds_(ds) {}

  // ObjectAlreadyExists if the silo has a project of that name.
  Result<model::Project> Create(const Request<model::Project>& rq, const std::string& name,
                                const std::string& description);
  // `deferred`: a request's checks leave the wait for durability to that scope (db::Reader).
  Result<model::Project> View(const Actor& actor, const NameOrId& project,
                              db::DeferredDurability* deferred = nullptr);
  Result<std::vector<model::Project>> List(const Actor& actor, const model::PageRequest& page);
  Result<model::Project> Update(const Request<model::Project>& rq, const NameOrId& project,
                                const model::IdentityUpdate& update);
  // The datastore refuses a project that still holds resources.
  Status Delete(const RequestContext& rq, const NameOrId& project);
  // The project's IP quotas and their use: every role reads them; a silo admin sets them
  // (RequireSiloAdmin). A fleet admin reaches any silo's project by id. A limit lowered below
  // use refuses new allocations and frees nothing.
  Result<model::ProjectQuotas> QuotasView(const Actor& actor, const NameOrId& project);
  Result<model::ProjectQuotas> QuotasUpdate(const Request<model::ProjectQuotas>& rq,
                                            const NameOrId& project,
                                            const model::ProjectQuotasUpdate& update);

 private:
  db::Datastore& ds_;
};

}  // namespace fp::app
