#include "app/floating_ips.h"

#include "app/ip_pools.h"
#include "db/external_ips.h"
#include "db/projects.h"
#include "db/request_effect.h"

namespace fp::app {

Result<model::ExternalIp> FloatingIps::Create(const Request<model::ExternalIp>& rq,
                                              const NameOrId& project, const std::string& name,
                                              const std::string& description,
                                              const model::AddressRequest& address) {
  const Actor& actor = rq.actor;
  model::Project p = FP_TRY(db::ProjectLookup(ds_, actor.silo_id, project));
  FP_CHECK_OK(RequireWrite(actor));
  model::FloatingIpCreate params;
  params.id = ds_.random().NewUuid();
  params.silo_id = actor.silo_id;
  params.project_id = p.id;
  params.name = name;
  params.description = description;
  params.address = address;
  auto created = db::FloatingIpCreate(ds_, params, db::EffectOf<model::ExternalIp>(rq));
  if (!created) return Fail(ExplainUnlinkedPool(ds_, actor, address.selector, created.error()));
  return created;
}

Result<model::ExternalIp> FloatingIps::View(const Actor& actor, const NameOrId& fip,
                                            const std::optional<NameOrId>& project,
                                            db::DeferredDurability* deferred) {
  if (fip.is_id()) {
    if (project) {
      return Fail(Error::InvalidRequest(
          "when providing Floating IP as an ID project should not be specified"));
    }
    return db::FloatingIpLookupById({ds_, deferred}, actor.silo_id, fip.id());
  }
  if (!project) {
    return Fail(
        Error::InvalidRequest("Floating IP should either be UUID or project should be specified"));
  }
  model::Project p = FP_TRY(db::ProjectLookup({ds_, deferred}, actor.silo_id, *project));
  return db::FloatingIpLookupByName({ds_, deferred}, p.id, fip.name().str());
}

Result<std::vector<model::ExternalIp>> FloatingIps::List(const Actor& actor,
                                                         const NameOrId& project,
                                                         const model::PageRequest& page) {
  model::Project p = FP_TRY(db::ProjectLookup(ds_, actor.silo_id, project));
  return db::FloatingIpList(ds_, p.id, page);
}

Result<model::ExternalIp> FloatingIps::Update(const Request<model::ExternalIp>& rq,
                                              const NameOrId& fip,
                                              const std::optional<NameOrId>& project,
                                              const model::IdentityUpdate& update) {
  const Actor& actor = rq.actor;
  model::ExternalIp e = FP_TRY(View(actor, fip, project));
  FP_CHECK_OK(RequireWrite(actor));
  return db::FloatingIpUpdate(ds_, e.id, update, db::EffectOf<model::ExternalIp>(rq));
}

Status FloatingIps::Delete(const RequestContext& rq, const NameOrId& fip,
                           const std::optional<NameOrId>& project) {
  const Actor& actor = rq.actor;
  model::ExternalIp e = FP_TRY(View(actor, fip, project));
  FP_CHECK_OK(RequireWrite(actor));
  return db::FloatingIpDelete(ds_, e.id, db::EffectOfNoContent(rq));
}

Result<model::ExternalIp> FloatingIps::Transfer(const Request<model::ExternalIp>& rq,
                                                const NameOrId& fip,
                                                const std::optional<NameOrId>& project,
                                                const NameOrId& to_project) {
  const Actor& actor = rq.actor;
  model::ExternalIp e = FP_TRY(View(actor, fip, project));
  model::Project target = FP_TRY(db::ProjectLookup(ds_, actor.silo_id, to_project));
  FP_CHECK_OK(RequireWrite(actor));
  return db::FloatingIpTransfer(ds_, e.id, target.id, db::EffectOf<model::ExternalIp>(rq));
}

}  // namespace fp::app
