#include "db/vm_removals.h"

#include <fmt/format.h>

#include "db/instances.h"

namespace fp::db {

Result<bool> VmRemovalBeginIf(Datastore& ds, const Uuid& instance_id, const std::string& holder,
                              int64_t ttl_us,
                              const std::function<bool(const std::optional<Instance>&)>& is_orphan,
                              const LeaseFence* fence) {
  return ds.Write<bool>([&](Tx& tx) -> Result<bool> {
    if (fence) FP_CHECK_OK(LeaseFenceCheckIn(tx, *fence));
    auto row = FP_TRY(tx.QueryRow(
        fmt::format("SELECT {} FROM instance i WHERE i.id = ?", kInstanceColumns), instance_id));
    std::optional<Instance> instance;
    if (row) instance = FP_TRY(InstanceFromRow(*row));
    if (!is_orphan(instance)) return false;
    int64_t n =
        FP_TRY(tx.Exec("INSERT INTO vm_removal (instance_id, holder, expires_at) VALUES (?, ?, ?) "
                       "ON CONFLICT (instance_id) DO UPDATE SET holder = excluded.holder, "
                       "expires_at = excluded.expires_at WHERE vm_removal.expires_at < ?",
                       instance_id, holder, tx.now() + ttl_us, tx.now()));
    return n == 1;
  });
}

Status VmRemovalEnd(Datastore& ds, const Uuid& instance_id, const std::string& holder) {
  return ds.Write([&](Tx& tx) -> Status {
    FP_TRY(tx.Exec("DELETE FROM vm_removal WHERE instance_id = ? AND holder = ?", instance_id,
                   holder));
    return Ok();
  });
}

Result<bool> VmRemovalInProgress(Datastore& ds, const Uuid& instance_id) {
  return ds.Read<bool>([&](Tx& tx) -> Result<bool> {
    auto row =
        FP_TRY(tx.QueryRow("SELECT 1 FROM vm_removal WHERE instance_id = ? AND expires_at >= ?",
                           instance_id, tx.now()));
    return row.has_value();
  });
}

}  // namespace fp::db
