#include "app/control_plane.h"

#include <fmt/format.h>

#include "db/external_ips.h"
#include "db/ip_pools.h"
#include "db/projects.h"
#include "db/silos.h"

namespace fp::app {

namespace {

Status RequireFleetAdmin(const Actor& actor) {
  if (!actor.is_fleet_admin()) return Fail(Error::Forbidden());
  return Ok();
}

Status RequireWrite(const Actor& actor) {
  if (!actor.can_write()) return Fail(Error::Forbidden());
  return Ok();
}

}  // namespace

// --- Silos ---

Result<model::Silo> ControlPlane::SiloCreate(const Actor& actor, model::SiloCreate params) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  params.id = Uuid::Random();
  return db::SiloCreate(ds_, params);
}

Result<model::Silo> ControlPlane::SiloView(const Actor& actor, const NameOrId& silo) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  return db::SiloLookup(ds_, silo);
}

Result<std::vector<model::Silo>> ControlPlane::SiloList(const Actor& actor,
                                                        const model::PageRequest& page) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  return db::SiloList(ds_, page);
}

Status ControlPlane::SiloDelete(const Actor& actor, const NameOrId& silo) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::Silo s = FP_TRY(db::SiloLookup(ds_, silo));
  if (s.id == actor.silo_id) {
    return Fail(Error::InvalidRequest(fmt::format(
        "silo \"{}\" holds the token making this request and cannot be deleted with it", s.name)));
  }
  Status deleted = db::SiloDelete(ds_, s.id);
  tokens_.Invalidate();  // the silo's tokens are revoked
  return deleted;
}

Result<std::vector<model::SiloIpPool>> ControlPlane::SiloPoolList(const Actor& actor,
                                                                  const NameOrId& silo,
                                                                  const model::PageRequest& page) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::Silo s = FP_TRY(db::SiloLookup(ds_, silo));
  return db::SiloPoolList(ds_, s.id, {}, page);
}

// --- Projects ---

Result<model::Project> ControlPlane::ProjectCreate(const Actor& actor, const std::string& name,
                                                   const std::string& description) {
  FP_CHECK_OK(RequireWrite(actor));
  return db::ProjectCreate(ds_, Uuid::Random(), actor.silo_id, name, description);
}

Result<model::Project> ControlPlane::ProjectView(const Actor& actor, const NameOrId& project) {
  return db::ProjectLookup(ds_, actor.silo_id, project);
}

Result<std::vector<model::Project>> ControlPlane::ProjectList(const Actor& actor,
                                                              const model::PageRequest& page) {
  return db::ProjectList(ds_, actor.silo_id, page);
}

Result<model::Project> ControlPlane::ProjectUpdate(const Actor& actor, const NameOrId& project,
                                                   const model::IdentityUpdate& update) {
  model::Project p = FP_TRY(db::ProjectLookup(ds_, actor.silo_id, project));
  FP_CHECK_OK(RequireWrite(actor));
  return db::ProjectUpdate(ds_, p.id, update);
}

Status ControlPlane::ProjectDelete(const Actor& actor, const NameOrId& project) {
  model::Project p = FP_TRY(db::ProjectLookup(ds_, actor.silo_id, project));
  FP_CHECK_OK(RequireWrite(actor));
  return db::ProjectDelete(ds_, p.id);
}

// --- System IP pools ---

Result<model::IpPool> ControlPlane::PoolCreate(const Actor& actor, model::PoolCreate params) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  params.id = Uuid::Random();
  return db::PoolCreate(ds_, params);
}

Result<model::IpPool> ControlPlane::PoolView(const Actor& actor, const NameOrId& pool) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  return db::PoolLookup(ds_, pool);
}

Result<std::vector<model::IpPool>> ControlPlane::PoolList(const Actor& actor,
                                                          const model::IpPoolFilter& filter,
                                                          const model::PageRequest& page) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  return db::PoolList(ds_, filter, page);
}

Result<model::IpPool> ControlPlane::PoolUpdate(const Actor& actor, const NameOrId& pool,
                                               const model::IdentityUpdate& update) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  return db::PoolUpdate(ds_, p.id, update);
}

Status ControlPlane::PoolDelete(const Actor& actor, const NameOrId& pool) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  return db::PoolDelete(ds_, p.id);
}

Result<std::vector<model::IpPoolRange>> ControlPlane::RangeList(const Actor& actor,
                                                                const NameOrId& pool,
                                                                std::optional<IpAddr> after,
                                                                int64_t limit) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  return db::RangeList(ds_, p.id, after, limit);
}

Result<model::IpPoolRange> ControlPlane::RangeAdd(const Actor& actor, const NameOrId& pool,
                                                  const IpRange& range) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  return db::RangeAdd(ds_, p.id, Uuid::Random(), range);
}

Status ControlPlane::RangeRemove(const Actor& actor, const NameOrId& pool, const IpRange& range) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  return db::RangeRemove(ds_, p.id, range);
}

Result<std::vector<model::SiloLink>> ControlPlane::LinkList(const Actor& actor,
                                                            const NameOrId& pool,
                                                            std::optional<Uuid> after,
                                                            int64_t limit) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  return db::LinkList(ds_, p.id, after, limit);
}

Result<model::SiloLink> ControlPlane::Link(const Actor& actor, const NameOrId& pool,
                                           const NameOrId& silo, bool is_default) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  return db::Link(ds_, p.id, silo, is_default);
}

Result<model::SiloLink> ControlPlane::LinkUpdate(const Actor& actor, const NameOrId& pool,
                                                 const NameOrId& silo, bool is_default) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  model::Silo s = FP_TRY(db::SiloLookup(ds_, silo));
  return db::LinkUpdate(ds_, p.id, s.id, is_default);
}

Status ControlPlane::Unlink(const Actor& actor, const NameOrId& pool, const NameOrId& silo) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  model::Silo s = FP_TRY(db::SiloLookup(ds_, silo));
  return db::Unlink(ds_, p.id, s.id);
}

Result<model::PoolUtilization> ControlPlane::Utilization(const Actor& actor, const NameOrId& pool) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::IpPool p = FP_TRY(db::PoolLookup(ds_, pool));
  return db::Utilization(ds_, p.id);
}

Result<std::vector<model::SiloIpPool>> ControlPlane::SiloScopedPoolList(
    const Actor& actor, const model::IpPoolFilter& filter, const model::PageRequest& page) {
  return db::SiloPoolList(ds_, actor.silo_id, filter, page);
}

Result<model::SiloIpPool> ControlPlane::SiloScopedPoolView(const Actor& actor,
                                                           const NameOrId& pool) {
  return db::SiloPoolLookup(ds_, actor.silo_id, pool);
}

// --- Floating IPs ---

Result<model::ExternalIp> ControlPlane::FloatingIpCreate(const Actor& actor,
                                                         const NameOrId& project,
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

Result<model::ExternalIp> ControlPlane::FloatingIpView(const Actor& actor, const NameOrId& fip,
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

Result<std::vector<model::ExternalIp>> ControlPlane::FloatingIpList(
    const Actor& actor, const NameOrId& project, const model::PageRequest& page) {
  model::Project p = FP_TRY(db::ProjectLookup(ds_, actor.silo_id, project));
  return db::FloatingIpList(ds_, p.id, page);
}

Result<model::ExternalIp> ControlPlane::FloatingIpUpdate(const Actor& actor, const NameOrId& fip,
                                                         const std::optional<NameOrId>& project,
                                                         const model::IdentityUpdate& update) {
  model::ExternalIp e = FP_TRY(FloatingIpView(actor, fip, project));
  FP_CHECK_OK(RequireWrite(actor));
  return db::FloatingIpUpdate(ds_, e.id, update);
}

Status ControlPlane::FloatingIpDelete(const Actor& actor, const NameOrId& fip,
                                      const std::optional<NameOrId>& project) {
  model::ExternalIp e = FP_TRY(FloatingIpView(actor, fip, project));
  FP_CHECK_OK(RequireWrite(actor));
  return db::FloatingIpDelete(ds_, e.id);
}

}  // namespace fp::app
