#include "app/floating_ips.h"

#include "db/external_ips.h"
#include "db/projects.h"

namespace fp::app {

Result<model::ExternalIp> FloatingIps::Create(const Actor& actor, const NameOrId& project,
                                              const std::string& name,
                                              const std::string& description,
                                              const model::AddressRequest& address) {
  model::Project p = FP_TRY(db::ProjectLookup(ds_, actor.silo_id, project));
  FP_CHECK_OK(RequireWrite(actor));
  model::FloatingIpCreate params;
  params.id = Uuid::Random();
  params.silo_id = actor.silo_id;
  params.project_id = p.id;
  params.name = name;
  params.description = description;
  params.address = address;
  return db::FloatingIpCreate(ds_, params);
}

Result<model::ExternalIp> FloatingIps::View(const Actor& actor, const NameOrId& fip,
                                            const std::optional<NameOrId>& project) {
  if (fip.is_id()) {
    if (project) {
      return Fail(Error::InvalidRequest(
          "when providing Floating IP as an ID project should not be specified"));
    }
    return db::FloatingIpLookupById(ds_, actor.silo_id, fip.id());
  }
  if (!project) {
    return Fail(
        Error::InvalidRequest("Floating IP should either be UUID or project should be specified"));
  }
  model::Project p = FP_TRY(db::ProjectLookup(ds_, actor.silo_id, *project));
  return db::FloatingIpLookupByName(ds_, p.id, fip.name().str());
}

Result<std::vector<model::ExternalIp>> FloatingIps::List(const Actor& actor,
                                                         const NameOrId& project,
                                                         const model::PageRequest& page) {
  model::Project p = FP_TRY(db::ProjectLookup(ds_, actor.silo_id, project));
  return db::FloatingIpList(ds_, p.id, page);
}

Result<model::ExternalIp> FloatingIps::Update(const Actor& actor, const NameOrId& fip,
                                              const std::optional<NameOrId>& project,
                                              const model::IdentityUpdate& update) {
  model::ExternalIp e = FP_TRY(View(actor, fip, project));
  FP_CHECK_OK(RequireWrite(actor));
  return db::FloatingIpUpdate(ds_, e.id, update);
}

Status FloatingIps::Delete(const Actor& actor, const NameOrId& fip,
                           const std::optional<NameOrId>& project) {
  model::ExternalIp e = FP_TRY(View(actor, fip, project));
  FP_CHECK_OK(RequireWrite(actor));
  return db::FloatingIpDelete(ds_, e.id);
}

}  // namespace fp::app
