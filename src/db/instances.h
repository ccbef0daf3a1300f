#pragma once

// Sleds, instances, their network interfaces and the NAT table. Whole-operation functions
// take the Datastore; the *In functions run inside a caller's transaction (saga actions), and
// each is idempotent: running it again after it committed changes nothing and returns the
// same result.

#include <optional>
#include <string>
#include <vector>

#include "db/datastore.h"
#include "model/instances.h"
#include "model/nat.h"

namespace fp::db {

// --- Sleds ---
// Registers the sled with this serial, or updates its agent URL; the id is stable per serial.
Result<Sled> SledUpsert(Datastore& ds, const std::string& serial, const std::string& agent_url,
                        const IpAddr& underlay);
Result<std::vector<Sled>> SledList(Datastore& ds);
Result<Sled> SledGet(Datastore& ds, const Uuid& id);
Result<Sled> SledGetIn(Tx& tx, const Uuid& id);
// Running (vmm) instances per sled, for placement.
Result<std::vector<std::pair<Uuid, int64_t>>> SledLoad(Datastore& ds);

// --- Instances ---
Result<Instance> InstanceById(Datastore& ds, const Uuid& silo_id, const Uuid& id);
Result<Instance> InstanceByName(Datastore& ds, const Uuid& project_id, const std::string& name);
Result<Instance> InstanceGetIn(Tx& tx, const Uuid& id);  // live only; NotFound by id
// A floating IP of the project by name (NotFound worded by name); an id selector is looked up
// by id (the caller checks the project).
Result<ExternalIp> FloatingIpByName(Datastore& ds, const Uuid& project_id, const NameOrId& fip);
Result<std::vector<Instance>> InstanceList(Datastore& ds, const Uuid& project_id,
                                           const PageRequest& page);
Result<std::vector<Instance>> InstancesOnSled(Datastore& ds, const Uuid& sled_id);
Result<std::vector<Instance>> InstancesWithVmm(Datastore& ds);
// The instance's (project name, silo name), for sled views.
Result<std::pair<std::string, std::string>> InstanceNames(Datastore& ds, const Uuid& id);
Result<std::optional<NetworkInterface>> PrimaryNicIn(Tx& tx, const Uuid& instance_id);
Result<std::optional<NetworkInterface>> PrimaryNic(Datastore& ds, const Uuid& instance_id);
// Live external IPs whose parent is the instance (all kinds and states).
Result<std::vector<ExternalIp>> InstanceExternalIpsIn(Tx& tx, const Uuid& instance_id);
Result<std::vector<ExternalIp>> InstanceExternalIps(Datastore& ds, const Uuid& instance_id);

// ncpus and memory change only while stopped (InvalidRequest otherwise).
Result<Instance> InstanceUpdateFields(Datastore& ds, const Uuid& id, const InstanceUpdate& u);

// Saga steps of instance create. Insert the instance (state creating) with its primary NIC
// in the project's VPC (created on first use).
Result<Instance> InstanceCreateRecordIn(Tx& tx, const InstanceCreate& p);
// Undo: soft-delete the instance and its NICs (tolerates their absence).
Status InstanceDeleteRecordIn(Tx& tx, const Uuid& id);
// Allocates the instance's SNAT block (kind snat, attached) with id `snat_id` from the silo's
// default unicast IPv4 pool: NotFound `default unicast IPv4 pool for current silo` without one.
Result<ExternalIp> SnatAllocateIn(Tx& tx, const Uuid& snat_id, const Uuid& instance_id,
                                  const Uuid& silo_id);
// Undo: soft-delete and release the SNAT row (tolerates its absence).
Status ExternalIpReleaseIn(Tx& tx, const Uuid& id);
// creating -> no_vmm (stopped).
Status InstanceFinishCreateIn(Tx& tx, const Uuid& id);

// Start: no_vmm -> vmm (starting) on `sled_id`, owned by `saga_id`. A re-run by the same
// saga changes nothing. InvalidRequest if the instance cannot start (ServiceUnavailable if
// another start is placing it).
Result<Instance> InstanceBeginStartIn(Tx& tx, const Uuid& id, const Uuid& sled_id,
                                      const Uuid& saga_id);
// The least loaded of `candidates` (fewest instances with a VMM), ties broken by id.
// ServiceUnavailable if there are no candidates.
Result<Uuid> PickSledIn(Tx& tx, const std::vector<Uuid>& candidates);
// Undo of start: back to no_vmm (stopped) if still placed on `sled_id`.
Status InstanceUndoStartIn(Tx& tx, const Uuid& id, const Uuid& sled_id);
// Sets the run state the sled reported; leaving the sled (stopped) moves vmm -> no_vmm and
// removes the instance's NAT rows. Returns the instance as updated.
Result<Instance> InstanceRecordRunState(Datastore& ds, const Uuid& id,
                                        const std::string& run_state);
// Sets the run state of an instance that has a VMM (stopping, rebooting, starting); no change
// for an instance without one.
Result<Instance> InstanceSetRunState(Datastore& ds, const Uuid& id, const std::string& run_state);
// The instance with this id, live or deleted (for reconciling sleds); NotFound if none.
Result<Instance> InstanceAnyState(Datastore& ds, const Uuid& id);

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

// --- NAT ---
// Ensures a live NAT row for each of the instance's external IPs pointing at `sled`; a live
// row for the same (ip, ports) with another target is replaced. ServiceUnavailable if an IP
// is mid attach/detach.
Result<std::vector<NatEntry>> NatEnsureForInstanceIn(Tx& tx, const Uuid& instance_id,
                                                     const Sled& sled);
// Soft-deletes every live NAT row of the instance.
Status NatRemoveForInstanceIn(Tx& tx, const Uuid& instance_id);
// The change feed: additions (live rows, at version_added) and removals (at version_removed)
// with version > `after`, in version order, at most `limit`.
struct NatFeedChange {
  NatEntry row;
  int64_t version = 0;
  bool deleted = false;
};
// The NAT changes after version `after` (at most `limit`, in version order), and the current
// NAT version, read in one transaction. May include commits not yet durable (for the switch
// feed only: a switch left ahead by a crash is repaired, see NatReconciler).
struct NatFeed {
  int64_t current_version = 0;
  std::vector<NatFeedChange> changes;
};
Result<NatFeed> NatChangesSince(Datastore& ds, int64_t after, int64_t limit);
Result<int64_t> NatCurrentVersion(Datastore& ds);
Result<std::vector<NatEntry>> NatLive(Datastore& ds);
// Deletes the NAT rows removed at a version below `below_version` (a removal every switch has
// installed) and before `removed_before`: the log keeps removals only as long as a switch may
// still need them (omicron-behaviour.md §5.6). Returns how many rows it deleted.
Result<int64_t> NatCollectGarbage(Datastore& ds, int64_t below_version, Timestamp removed_before);

}  // namespace fp::db
