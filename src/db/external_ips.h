#pragma once

// Floating IPs, and the pool an address request resolves to (external_ips.cc). Attaching
// external IPs to instances is in attach.h.

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/name.h"
#include "db/datastore.h"
#include "model/external_ips.h"
#include "model/page.h"
#include "model/silos.h"

namespace fp::db {

Result<model::ExternalIp> FloatingIpCreate(Datastore& ds, const model::FloatingIpCreate& params,
                                           const Effect<model::ExternalIp>& effect = {});
Result<model::ExternalIp> FloatingIpLookupById(Reader ds, const Uuid& silo_id, const Uuid& id);
Result<model::ExternalIp> FloatingIpLookupByIdIn(Tx& tx, const Uuid& silo_id, const Uuid& id);
Result<model::ExternalIp> FloatingIpLookupByName(Reader ds, const Uuid& project_id,
                                                 const std::string& name);
Result<std::vector<model::ExternalIp>> FloatingIpList(Datastore& ds, const Uuid& project_id,
                                                      const model::PageRequest& page);
Result<model::ExternalIp> FloatingIpUpdate(Datastore& ds, const Uuid& id,
                                           const model::IdentityUpdate& update,
                                           const Effect<model::ExternalIp>& effect = {});
// Moves a detached floating IP to another live project of its silo (`to_project`), keeping
// its id, address and name (issue 25). InvalidRequest naming the holder while it is attached
// or mid-operation; ObjectAlreadyExists naming the name if the target project has one.
// Moving it to its own project changes nothing.
Result<model::ExternalIp> FloatingIpTransfer(Datastore& ds, const Uuid& id, const Uuid& to_project,
                                             const Effect<model::ExternalIp>& effect = {});
// Refused while attached (the message names the holder); the address returns to the pool.
Status FloatingIpDelete(Datastore& ds, const Uuid& id, const Effect<void>& effect = {});
// FloatingIpDelete's body, inside the caller's transaction. Passes sync point
// "floating_ip_delete:checked" (`sync_point` may be empty) once the IP is known deletable, on
// PostgreSQL once it is deleted (there the check and the change are one statement).
Status FloatingIpDeleteIn(Tx& tx, const Uuid& id,
                          const std::function<void(std::string_view)>& sync_point);

// A floating IP of the project by name (NotFound worded by name); an id selector is looked up
// by id (the caller checks the project).
Result<model::ExternalIp> FloatingIpByName(Datastore& ds, const Uuid& project_id,
                                           const NameOrId& fip);

// Creates a floating IP inside the caller's transaction (FloatingIpCreate's body; also used to
// populate large pools in one transaction for benchmarks). `sync_point` may be empty.
Result<model::ExternalIp> FloatingIpCreateIn(
    Tx& tx, const model::FloatingIpCreate& params,
    const std::function<void(std::string_view)>& sync_point);

// The pool `selector` names for the silo: the silo's default unicast pool (of the selector's
// version), or an explicit unicast pool linked to the silo. NotFound / InvalidRequest worded
// as the API words them.
Result<Uuid> ResolvePoolIdIn(Tx& tx, const Uuid& silo_id, const model::PoolSelector& selector);

// --- The external IPs of instances (attaching them: attach.h) ---

// The external IP row with this id, live or not; NotFound if there is none.
// An external IP row's columns, the table aliased `e`, and their decoding: for statements that
// read an external IP beside other rows (db/attach.cc).
inline constexpr std::string_view kExternalIpColumns =
    "e.id, e.name, e.description, e.ip_pool_id, e.ip_pool_range_id, e.parent_id, e.kind, e.ip, "
    "e.first_port, e.last_port, e.project_id, e.state, e.time_created, e.time_modified";
inline constexpr size_t kExternalIpColumnCount = 14;
Result<model::ExternalIp> ExternalIpFromRow(const Row& r);
// A stored kind or state column; text that is none of the enum's is Internal (corruption).
Result<model::IpKind> IpKindColumn(const Row& r, size_t i);
Result<model::AttachState> AttachStateColumn(const Row& r, size_t i);

Result<model::ExternalIp> ExternalIpGetIn(Tx& tx, const Uuid& id);
// Live external IPs whose parent is the instance (all kinds and states).
Result<std::vector<model::ExternalIp>> InstanceExternalIpsIn(Tx& tx, const Uuid& instance_id);
Result<std::vector<model::ExternalIp>> InstanceExternalIps(Reader ds, const Uuid& instance_id);
// The external IPs of every instance placed on the sled, by instance, in one read (a sled's
// full comparison reads them all at once rather than one instance at a time).
Result<std::map<Uuid, std::vector<model::ExternalIp>>> ExternalIpsOnSled(Datastore& ds,
                                                                         const Uuid& sled_id);
// Soft-deletes the external IP and returns its address (or SNAT block) to its pool; tolerates
// its absence (the undo of SnatAllocateIn, and how an instance's delete releases its IPs).
Status ExternalIpReleaseIn(Tx& tx, const Uuid& id);

}  // namespace fp::db
