#include "app/projects.h"

#include "db/projects.h"
#include "db/quotas.h"
#include "db/request_effect.h"

namespace fp::app {

Result<model::Project> Projects::Create(const Request<model::Project>& rq, const std::string& name,
                                        const std::string& description) {
  const Actor& actor = rq.actor;
  FP_CHECK_OK(RequireWrite(actor));
  return db::ProjectCreate(ds_, ds_.random().NewUuid(), actor.silo_id, name, description,
                           db::EffectOf<model::Project>(rq));
}

Result<model::Project> Projects::View(const Actor& actor, const NameOrId& project,
                                      db::DeferredDurability* deferred) {
  return db::ProjectLookup({ds_, deferred}, actor.silo_id, project);
}

Result<std::vector<model::Project>> Projects::List(const Actor& actor,
                                                   const model::PageRequest& page) {
  return db::ProjectList(ds_, actor.silo_id, page);
}

Result<model::Project> Projects::Update(const Request<model::Project>& rq, const NameOrId& project,
                                        const model::IdentityUpdate& update) {
  const Actor& actor = rq.actor;
  model::Project p = FP_TRY(db::ProjectLookup(ds_, actor.silo_id, project));
  FP_CHECK_OK(RequireWrite(actor));
  return db::ProjectUpdate(ds_, p.id, update, db::EffectOf<model::Project>(rq));
}

Status Projects::Delete(const RequestContext& rq, const NameOrId& project) {
  const Actor& actor = rq.actor;
  model::Project p = FP_TRY(db::ProjectLookup(ds_, actor.silo_id, project));
  FP_CHECK_OK(RequireWrite(actor));
  return db::ProjectDelete(ds_, p.id, db::EffectOfNoContent(rq));
}

namespace {

// The project whose quotas are read or set: one of the actor's silo, or for a fleet admin any
// silo's project named by id (the datastore then answers NotFound unless it is live).
Result<Uuid> QuotaProjectId(db::Datastore& ds, const Actor& actor, const NameOrId& project) {
  if (actor.is_fleet_admin() && project.is_id()) return project.id();
  return FP_TRY(db::ProjectLookup(ds, actor.silo_id, project)).id;
}

}  // namespace

Result<model::ProjectQuotas> Projects::QuotasView(const Actor& actor, const NameOrId& project) {
  return db::ProjectQuotasView(ds_, FP_TRY(QuotaProjectId(ds_, actor, project)));
}

Result<model::ProjectQuotas> Projects::QuotasUpdate(const Request<model::ProjectQuotas>& rq,
                                                    const NameOrId& project,
                                                    const model::ProjectQuotasUpdate& update) {
  Uuid id = FP_TRY(QuotaProjectId(ds_, rq.actor, project));
  FP_CHECK_OK(RequireSiloAdmin(rq.actor));
  return db::ProjectQuotasUpdate(ds_, id, update, db::EffectOf<model::ProjectQuotas>(rq));
}

}  // namespace fp::app
