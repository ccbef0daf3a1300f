#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/token_cache.h"
#include "common/error.h"
#include "common/name.h"
#include "db/datastore.h"
#include "model/external_ips.h"
#include "model/ip_pools.h"
#include "model/page.h"
#include "model/silos.h"

namespace fp::app {

// Who is making a request: the token's silo and role.
struct Actor {
  Uuid token_id;
  Uuid silo_id;
  model::Role role = model::Role::kSiloViewer;

  bool is_fleet_admin() const { return role == model::Role::kFleetAdmin; }
  // Fleet admins, silo admins and silo collaborators may create and change silo resources.
  bool can_write() const { return role != model::Role::kSiloViewer; }
};

// A newly minted token: the secret is shown once and stored only as a hash.
struct IssuedToken {
  model::Token token;
  std::string secret;
};

// The product's operations: authorization, resolution of the API's selectors (names within a
// project, ids across the silo), and the datastore calls that carry them out. Each method
// takes the acting token first. Thread-safe.
//
// Errors: Forbidden (403) for an operation the role does not allow; NotFound for resources
// that are absent *or* in another silo; the datastore's errors otherwise.
class ControlPlane {
 public:
  explicit ControlPlane(db::Datastore& datastore)
      : ds_(datastore), tokens_(datastore, datastore.clock()) {}

  // Unauthenticated (401) when the secret matches no live token.
  Result<Actor> Authenticate(const std::string& secret);

  // Creates the silo `default` and a fleet-admin token in it if no silo named `default`
  // exists yet. Returns the token's secret when one was minted. Idempotent.
  Result<std::optional<std::string>> BootstrapDev();
  // Mints another fleet-admin token in silo `default` (used when the token file was lost).
  Result<std::string> MintFleetAdminToken(const std::string& name);

  // Tokens (fleet admin only).
  Result<IssuedToken> TokenCreate(const Actor& actor, const NameOrId& silo, model::Role role,
                                  const std::string& name);
  Status TokenRevoke(const Actor& actor, const Uuid& id);

  // Silos (fleet admin only).
  Result<model::Silo> SiloCreate(const Actor& actor, model::SiloCreate params);
  Result<model::Silo> SiloView(const Actor& actor, const NameOrId& silo);
  Result<std::vector<model::Silo>> SiloList(const Actor& actor, const model::PageRequest& page);
  Status SiloDelete(const Actor& actor, const NameOrId& silo);
  Result<std::vector<model::SiloIpPool>> SiloPoolList(const Actor& actor, const NameOrId& silo,
                                                      const model::PageRequest& page);

  // Projects of the actor's silo.
  Result<model::Project> ProjectCreate(const Actor& actor, const std::string& name,
                                       const std::string& description);
  Result<model::Project> ProjectView(const Actor& actor, const NameOrId& project);
  Result<std::vector<model::Project>> ProjectList(const Actor& actor,
                                                  const model::PageRequest& page);
  Result<model::Project> ProjectUpdate(const Actor& actor, const NameOrId& project,
                                       const model::IdentityUpdate& update);
  Status ProjectDelete(const Actor& actor, const NameOrId& project);

  // System IP pools (fleet admin only).
  Result<model::IpPool> PoolCreate(const Actor& actor, model::PoolCreate params);
  Result<model::IpPool> PoolView(const Actor& actor, const NameOrId& pool);
  Result<std::vector<model::IpPool>> PoolList(const Actor& actor, const model::IpPoolFilter& filter,
                                              const model::PageRequest& page);
  Result<model::IpPool> PoolUpdate(const Actor& actor, const NameOrId& pool,
                                   const model::IdentityUpdate& update);
  Status PoolDelete(const Actor& actor, const NameOrId& pool);
  Result<std::vector<model::IpPoolRange>> RangeList(const Actor& actor, const NameOrId& pool,
                                                    std::optional<IpAddr> after, int64_t limit);
  Result<model::IpPoolRange> RangeAdd(const Actor& actor, const NameOrId& pool,
                                      const IpRange& range);
  Status RangeRemove(const Actor& actor, const NameOrId& pool, const IpRange& range);
  Result<std::vector<model::SiloLink>> LinkList(const Actor& actor, const NameOrId& pool,
                                                std::optional<Uuid> after, int64_t limit);
  Result<model::SiloLink> Link(const Actor& actor, const NameOrId& pool, const NameOrId& silo,
                               bool is_default);
  Result<model::SiloLink> LinkUpdate(const Actor& actor, const NameOrId& pool, const NameOrId& silo,
                                     bool is_default);
  Status Unlink(const Actor& actor, const NameOrId& pool, const NameOrId& silo);
  Result<model::PoolUtilization> Utilization(const Actor& actor, const NameOrId& pool);

  // IP pools as the actor's silo sees them.
  Result<std::vector<model::SiloIpPool>> SiloScopedPoolList(const Actor& actor,
                                                            const model::IpPoolFilter& filter,
                                                            const model::PageRequest& page);
  Result<model::SiloIpPool> SiloScopedPoolView(const Actor& actor, const NameOrId& pool);

  // Floating IPs. `project` is required with a name and forbidden with an id (§2.0).
  Result<model::ExternalIp> FloatingIpCreate(const Actor& actor, const NameOrId& project,
                                             const std::string& name,
                                             const std::string& description,
                                             const model::AddressRequest& address);
  Result<model::ExternalIp> FloatingIpView(const Actor& actor, const NameOrId& fip,
                                           const std::optional<NameOrId>& project);
  Result<std::vector<model::ExternalIp>> FloatingIpList(const Actor& actor, const NameOrId& project,
                                                        const model::PageRequest& page);
  Result<model::ExternalIp> FloatingIpUpdate(const Actor& actor, const NameOrId& fip,
                                             const std::optional<NameOrId>& project,
                                             const model::IdentityUpdate& update);
  Status FloatingIpDelete(const Actor& actor, const NameOrId& fip,
                          const std::optional<NameOrId>& project);

  db::Datastore& datastore() { return ds_; }

 private:
  db::Datastore& ds_;
  TokenCache tokens_;  // emptied after every revocation and silo delete
};

}  // namespace fp::app
