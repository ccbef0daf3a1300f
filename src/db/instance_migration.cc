// An instance's migration steps (instances.h, the migrate saga's): marked migrating, moved to
// its destination with its NAT, or back to its source, and the mark taken off.

#include <fmt/format.h>

#include "db/instances.h"
#include "db/nat.h"

namespace fp::db {

Result<Instance> InstanceBeginMigrateIn(Tx& tx, const Uuid& id, const Uuid& dst,
                                        const Uuid& migration_id) {
  Instance i = FP_TRY(InstanceGetIn(tx, id));
  if (i.migration_id == migration_id) return i;  // re-run
  if (i.state != InstanceState::kVmm || i.run_state != RunState::kRunning) {
    return Fail(Error::InvalidRequest(
        fmt::format("instance \"{}\" can only be migrated while running (it is {})", i.name,
                    ToString(i.run_state))));
  }
  if (i.migration_id) {
    return Fail(Error::Unavailable(fmt::format(
        "instance \"{}\" is already migrating; retry when that migration completes", i.name)));
  }
  if (i.sled_id == dst) {
    return Fail(Error::InvalidRequest(
        fmt::format("instance \"{}\" already runs on sled {}", i.name, dst.ToString())));
  }
  if (FP_TRY(SledGetIn(tx, dst)).expunged) {
    return Fail(Error::InvalidRequest(
        fmt::format("sled {} is expunged: nothing runs on it any more; migrate to another sled",
                    dst.ToString())));
  }
  FP_TRY(tx.Exec(
      "UPDATE instance SET migration_id = ?, run_state = 'migrating', time_run_state_updated = ? "
      "WHERE id = ?",
      migration_id, tx.now(), id));
  return InstanceGetIn(tx, id);
}

Status InstanceUndoMigrateIn(Tx& tx, const Uuid& id, const Uuid& migration_id) {
  FP_TRY(tx.Exec(
      "UPDATE instance SET migration_id = NULL, run_state = 'running', time_run_state_updated = ? "
      "WHERE id = ? AND migration_id = ?",
      tx.now(), id, migration_id));
  return Ok();
}

Status InstanceRevertMigrateIn(Tx& tx, const Uuid& id, const Uuid& src, const Uuid& migration_id) {
  Instance i = FP_TRY(InstanceGetIn(tx, id));
  if (i.migration_id && *i.migration_id == migration_id && i.sled_id == src) return Ok();
  Sled sled = FP_TRY(SledGetIn(tx, src));
  FP_TRY(
      tx.Exec("UPDATE instance SET sled_id = ?, migration_id = ?, run_state = 'migrating', "
              "time_run_state_updated = ? WHERE id = ?",
              src, migration_id, tx.now(), id));
  FP_TRY(NatEnsureForInstanceIn(tx, id, sled));
  return Ok();
}

Status InstanceFinishMigrateIn(Tx& tx, const Uuid& id, const Uuid& dst, const Uuid& migration_id) {
  Instance i = FP_TRY(InstanceGetIn(tx, id));
  if (i.migration_id != migration_id) return Ok();  // re-run after the migration ended
  Sled sled = FP_TRY(SledGetIn(tx, dst));
  FP_TRY(
      tx.Exec("UPDATE instance SET sled_id = ?, run_state = 'running', time_run_state_updated = ? "
              "WHERE id = ?",
              dst, tx.now(), id));
  FP_TRY(NatEnsureForInstanceIn(tx, id, sled));
  return Ok();
}

Status InstanceEndMigrateIn(Tx& tx, const Uuid& id, const Uuid& migration_id) {
  FP_TRY(tx.Exec("UPDATE instance SET migration_id = NULL WHERE id = ? AND migration_id = ?", id,
                 migration_id));
  return Ok();
}

}  // namespace fp::db
