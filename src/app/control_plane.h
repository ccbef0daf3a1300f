#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/name.h"
#include "db/datastore.h"

namespace fp::app {

// Who is making a request: the token's silo and role.
struct Actor {
  Uuid token_id;
  Uuid silo_id;
  db::Role role = db::Role::kSiloViewer;

  bool is_fleet_admin() const { return role == db::Role::kFleetAdmin; }
  // Fleet admins, silo admins and silo collaborators may create and change silo resources.
  bool can_write() const { return role != db::Role::kSiloViewer; }
};

// A newly minted token: the secret is shown once and stored only as a hash.
struct IssuedToken {
  db::Token token;
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
  explicit ControlPlane(db::Datastore& datastore) : ds_(datastore) {}

  // Unauthenticated (401) when the secret matches no live token.
  Result<Actor> Authenticate(const std::string& secret);

  // Creates the silo `default` and a fleet-admin token in it if no silo named `default`
  // exists yet. Returns the token's secret when one was minted. Idempotent.
  Result<std::optional<std::string>> BootstrapDev();
  // Mints another fleet-admin token in silo `default` (used when the token file was lost).
  Result<std::string> MintFleetAdminToken(const std::string& name);

  // Tokens (fleet admin only).
  Result<IssuedToken> TokenCreate(const Actor& actor, const NameOrId& silo, db::Role role,
                                  const std::string& name);
  Status TokenRevoke(const Actor& actor, const Uuid& id);

  // Silos (fleet admin only).
  Result<db::Silo> SiloCreate(const Actor& actor, db::SiloCreate params);
  Result<db::Silo> SiloView(const Actor& actor, const NameOrId& silo);
  Result<std::vector<db::Silo>> SiloList(const Actor& actor, const db::PageRequest& page);
  Status SiloDelete(const Actor& actor, const NameOrId& silo);
  Result<std::vector<db::SiloIpPool>> SiloPoolList(const Actor& actor, const NameOrId& silo,
                                                   const db::PageRequest& page);

  // Projects of the actor's silo.
  Result<db::Project> ProjectCreate(const Actor& actor, const std::string& name,
                                    const std::string& description);
  Result<db::Project> ProjectView(const Actor& actor, const NameOrId& project);
  Result<std::vector<db::Project>> ProjectList(const Actor& actor, const db::PageRequest& page);
  Result<db::Project> ProjectUpdate(const Actor& actor, const NameOrId& project,
                                    const db::IdentityUpdate& update);
  Status ProjectDelete(const Actor& actor, const NameOrId& project);

  // System IP pools (fleet admin only).
  Result<db::IpPool> PoolCreate(const Actor& actor, db::PoolCreate params);
  Result<db::IpPool> PoolView(const Actor& actor, const NameOrId& pool);
  Result<std::vector<db::IpPool>> PoolList(const Actor& actor, const db::IpPoolFilter& filter,
                                           const db::PageRequest& page);
  Result<db::IpPool> PoolUpdate(const Actor& actor, const NameOrId& pool,
                                const db::IdentityUpdate& update);
  Status PoolDelete(const Actor& actor, const NameOrId& pool);
  Result<std::vector<db::IpPoolRange>> RangeList(const Actor& actor, const NameOrId& pool,
                                                 std::optional<IpAddr> after, int64_t limit);
  Result<db::IpPoolRange> RangeAdd(const Actor& actor, const NameOrId& pool, const IpRange& range);
  Status RangeRemove(const Actor& actor, const NameOrId& pool, const IpRange& range);
  Result<std::vector<db::SiloLink>> LinkList(const Actor& actor, const NameOrId& pool,
                                             std::optional<Uuid> after, int64_t limit);
  Result<db::SiloLink> Link(const Actor& actor, const NameOrId& pool, const NameOrId& silo,
                            bool is_default);
  Result<db::SiloLink> LinkUpdate(const Actor& actor, const NameOrId& pool, const NameOrId& silo,
                                  bool is_default);
  Status Unlink(const Actor& actor, const NameOrId& pool, const NameOrId& silo);
  Result<db::PoolUtilization> Utilization(const Actor& actor, const NameOrId& pool);

  // IP pools as the actor's silo sees them.
  Result<std::vector<db::SiloIpPool>> SiloScopedPoolList(const Actor& actor,
                                                         const db::IpPoolFilter& filter,
                                                         const db::PageRequest& page);
  Result<db::SiloIpPool> SiloScopedPoolView(const Actor& actor, const NameOrId& pool);

  // Floating IPs. `project` is required with a name and forbidden with an id (§2.0).
  Result<db::ExternalIp> FloatingIpCreate(const Actor& actor, const NameOrId& project,
                                          const std::string& name, const std::string& description,
                                          const db::AddressRequest& address);
  Result<db::ExternalIp> FloatingIpView(const Actor& actor, const NameOrId& fip,
                                        const std::optional<NameOrId>& project);
  Result<std::vector<db::ExternalIp>> FloatingIpList(const Actor& actor, const NameOrId& project,
                                                     const db::PageRequest& page);
  Result<db::ExternalIp> FloatingIpUpdate(const Actor& actor, const NameOrId& fip,
                                          const std::optional<NameOrId>& project,
                                          const db::IdentityUpdate& update);
  Status FloatingIpDelete(const Actor& actor, const NameOrId& fip,
                          const std::optional<NameOrId>& project);

  db::Datastore& datastore() { return ds_; }

 private:
  db::Datastore& ds_;
};

}  // namespace fp::app
