#include "app/projects.h"

#include "db/projects.h"

namespace fp::app {

Result<model::Project> Projects::Create(const Actor& actor, const std::string& name,
                                        const std::string& description) {
  FP_CHECK_OK(RequireWrite(actor));
  return db::ProjectCreate(ds_, Uuid::Random(), actor.silo_id, name, description);
}

Result<model::Project> Projects::View(const Actor& actor, const NameOrId& project) {
  return db::ProjectLookup(ds_, actor.silo_id, project);
}

Result<std::vector<model::Project>> Projects::List(const Actor& actor,
                                                   const model::PageRequest& page) {
  return db::ProjectList(ds_, actor.silo_id, page);
}

Result<model::Project> Projects::Update(const Actor& actor, const NameOrId& project,
                                        const model::IdentityUpdate& update) {
  model::Project p = FP_TRY(db::ProjectLookup(ds_, actor.silo_id, project));
  FP_CHECK_OK(RequireWrite(actor));
  return db::ProjectUpdate(ds_, p.id, update);
}

Status Projects::Delete(const Actor& actor, const NameOrId& project) {
  model::Project p = FP_TRY(db::ProjectLookup(ds_, actor.silo_id, project));
  FP_CHECK_OK(RequireWrite(actor));
  return db::ProjectDelete(ds_, p.id);
}

}  // namespace fp::app
