#pragma once

// Instances and their network interfaces. Whole-operation functions take the Datastore; the
// *In functions run inside a caller's transaction (saga actions), and each is idempotent:
// running it again after it committed changes nothing and returns the same result. The
// instance's external IPs are in external_ips.h, its NAT rows in nat.h, sleds in sleds.h.

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "db/datastore.h"
#include "db/external_ips.h"
#include "db/lease_fence.h"
#include "db/sleds.h"
#include "model/instances.h"

namespace fp::db {

// --- Instances ---
Result<Instance> InstanceById(Reader ds, const Uuid& silo_id, const Uuid& id);
Result<Instance> InstanceByIdIn(Tx& tx, const Uuid& silo_id, const Uuid& id);
Result<Instance> InstanceByName(Reader ds, const Uuid& project_id, const std::string& name);
// An instance row's columns, the table aliased `i`, and their decoding: for statements that read
// an instance beside other rows (db/attach.cc).
inline constexpr std::string_view kInstanceColumns =
    "i.id, i.project_id, i.name, i.description, i.hostname, i.ncpus, i.memory, i.state, "
    "i.run_state, i.sled_id, i.migration_id, i.time_run_state_updated, i.time_created, "
    "i.time_modified, i.start_saga_id";
inline constexpr size_t kInstanceColumnCount = 15;
Result<Instance> InstanceFromRow(const Row& r);

Result<Instance> InstanceGetIn(Tx& tx, const Uuid& id);  // live only; NotFound by id
Result<std::vector<Instance>> InstanceList(Datastore& ds, const Uuid& project_id,
                                           const PageRequest& page);
Result<std::vector<Instance>> InstancesOnSled(Datastore& ds, const Uuid& sled_id);
// The instance's (project name, silo name), for sled views.
Result<std::pair<std::string, std::string>> InstanceNames(Datastore& ds, const Uuid& id);
Result<std::optional<NetworkInterface>> PrimaryNicIn(Tx& tx, const Uuid& instance_id);
Result<std::optional<NetworkInterface>> PrimaryNic(Datastore& ds, const Uuid& instance_id);

// ncpus and memory change only while stopped (InvalidRequest otherwise).
Result<Instance> InstanceUpdateFields(Datastore& ds, const Uuid& id, const InstanceUpdate& u,
                                      const Effect<Instance>& effect = {});

// Saga steps of instance create. Insert the instance (state creating) with its primary NIC
// in the project's VPC (created on first use).
Result<Instance> InstanceCreateRecordIn(Tx& tx, const InstanceCreate& p);
// Undo: soft-delete the instance and its NICs (tolerates their absence).
Status InstanceDeleteRecordIn(Tx& tx, const Uuid& id);
// creating -> no_vmm (stopped).
Status InstanceFinishCreateIn(Tx& tx, const Uuid& id);

// Start: no_vmm -> vmm (starting) on `sled_id`, owned by `saga_id`. A re-run by the same
// saga changes nothing. InvalidRequest if the instance cannot start (ServiceUnavailable if
// another start is placing it).
Result<Instance> InstanceBeginStartIn(Tx& tx, const Uuid& id, const Uuid& sled_id,
                                      const Uuid& saga_id);
// A failed instance (its VM lost) made stopped, as a stop of it asks: no sled holds it, so
// nothing else is to be done. An instance no longer failed is returned as it is.
Result<Instance> InstanceStopFailed(Datastore& ds, const Uuid& id,
                                    const Effect<Instance>& effect = {});
// Undo of start: back to no_vmm (stopped) if still placed on `sled_id`.
Status InstanceUndoStartIn(Tx& tx, const Uuid& id, const Uuid& sled_id);
// Sets the run state the sled reported; leaving the sled (stopped) moves vmm -> no_vmm and
// removes the instance's NAT rows. With `judged_on` (the row the caller's decision was made on),
// nothing changes if the instance moved on since (another sled, run state or start): a stale
// judgement never undoes a newer start. With `fence`, nothing changes (ServiceUnavailable) once
// its holder no longer holds its lease. Returns the instance as it is now.
Result<Instance> InstanceRecordRunState(Datastore& ds, const Uuid& id, RunState run_state,
                                        const Instance* judged_on = nullptr,
                                        const LeaseFence* fence = nullptr);
// Sets the run state of an instance that has a VMM (stopping, rebooting, starting); no change
// for an instance without one.
Result<Instance> InstanceSetRunState(Datastore& ds, const Uuid& id, RunState run_state,
                                     const Effect<Instance>& effect = {});
// The instance with this id, live or deleted (for reconciling sleds); NotFound if none.
Result<Instance> InstanceAnyState(Datastore& ds, const Uuid& id);
// The same and the instance's external IPs (InstanceExternalIpsIn), in one read (deferred
// durability: Reader).
struct InstanceAndIps {
  Instance instance;
  std::vector<ExternalIp> ips;
};
Result<InstanceAndIps> InstanceAnyStateWithIps(Reader ds, const Uuid& id);
// The same for several instances in one read transaction (on PostgreSQL the same statement
// for each, all of them with the COMMIT in one exchange): those that exist, by id; an id with
// no row is absent from the map.
Result<std::map<Uuid, InstanceAndIps>> InstancesAnyStateWithIps(Reader ds,
                                                                const std::vector<Uuid>& ids);

// Migration: mark migrating to `dst` (running, not migrating, not already there).
Result<Instance> InstanceBeginMigrateIn(Tx& tx, const Uuid& id, const Uuid& dst,
                                        const Uuid& migration_id);
Status InstanceUndoMigrateIn(Tx& tx, const Uuid& id, const Uuid& migration_id);
// Undo of FinishMigrate: back on `src`, still migrating, NAT pointed at `src` again.
Status InstanceRevertMigrateIn(Tx& tx, const Uuid& id, const Uuid& src, const Uuid& migration_id);
// Moves the instance: sled = dst, running, NAT re-pointed at dst. The migration stays marked
// until InstanceEndMigrateIn: until the saga settles, the source VM may still be the one the
// instance keeps (an unwind moves it back), so nothing may take it for an orphan.
Status InstanceFinishMigrateIn(Tx& tx, const Uuid& id, const Uuid& dst, const Uuid& migration_id);
// Clears the migration mark once the source VM is gone. Idempotent.
Status InstanceEndMigrateIn(Tx& tx, const Uuid& id, const Uuid& migration_id);

// Delete: refused before any change unless stopped (no_vmm) or failed. Releases SNAT and
// ephemeral addresses, detaches floating IPs, removes NICs and NAT rows, soft-deletes.
Status InstanceDeleteIn(Tx& tx, const Uuid& id);

}  // namespace fp::db
