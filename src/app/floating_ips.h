#pragma once

#include <optional>
#include <string>
#include <vector>

#include "app/actor.h"
#include "app/request.h"
#include "common/error.h"
#include "common/name.h"
#include "model/external_ips.h"
#include "model/page.h"
#include "model/silos.h"

namespace fp::db {
class Datastore;
class DeferredDurability;
}  // namespace fp::db

namespace fp::app {

// The floating IPs of the actor's silo (their attach and detach are the instances service's).
// A floating IP is named by id, or by name with its project (§2.0): InvalidRequest for an id
// with a project and for a name without one. Changing one needs RequireWrite (Forbidden, 403),
// checked after the lookups. NotFound for what is absent or in another silo; the datastore's
// errors otherwise (InsufficientCapacity when no address is free). Thread-safe.
class FloatingIps {
 public:
  explicit FloatingIps(db::Datastore& ds) : ds_(ds) {}

  Result<model::ExternalIp> Create(const Request<model::ExternalIp>& rq, const NameOrId& project,
                                   const std::string& name, const std::string& description,
                                   const model::AddressRequest& address);
  // `deferred`: a request's checks leave the wait for durability to that scope (db::Reader).
  Result<model::ExternalIp> View(const Actor& actor, const NameOrId& fip,
                                 const std::optional<NameOrId>& project,
                                 db::DeferredDurability* deferred = nullptr);
  Result<std::vector<model::ExternalIp>> List(const Actor& actor, const NameOrId& project,
                                              const model::PageRequest& page);
  Result<model::ExternalIp> Update(const Request<model::ExternalIp>& rq, const NameOrId& fip,
                                   const std::optional<NameOrId>& project,
                                   const model::IdentityUpdate& update);
  Status Delete(const RequestContext& rq, const NameOrId& fip,
                const std::optional<NameOrId>& project);
  // To another project of the actor's silo, detached, keeping its address, id and name.
  Result<model::ExternalIp> Transfer(const Request<model::ExternalIp>& rq, const NameOrId& fip,
                                     const std::optional<NameOrId>& project,
                                     const NameOrId& to_project);

 private:
  db::Datastore& ds_;
};

}  // namespace fp::app
