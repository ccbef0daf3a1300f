#include "sim/lookups.h"

namespace fp::sim {

bool AttachedElsewhere(db::Datastore& ds, const std::string& fip, const std::string& instance) {
  auto holder = ds.Read<bool>([&](db::Tx& tx) -> Result<bool> {
    auto row = FP_TRY(tx.QueryRow(
        "SELECT e.state, coalesce(i.name, '') FROM external_ip e LEFT JOIN instance i ON "
        "i.id = e.parent_id WHERE e.kind = 'floating' AND e.name = ? AND "
        "e.time_deleted IS NULL",
        fip));
    return row && row->Text(0) == "attached" && row->Text(1) != instance;
  });
  return holder && *holder;
}

std::optional<std::pair<Uuid, Uuid>> FloatingIpAndInstanceIds(db::Datastore& ds,
                                                              const std::string& fip,
                                                              const std::string& instance) {
  using Pair = std::optional<std::pair<Uuid, Uuid>>;
  auto ids = ds.Read<Pair>([&](db::Tx& tx) -> Result<Pair> {
    // Two lookups, not a join of the two tables: SQLite answered the join by building an
    // automatic index of one of them at every run.
    auto row = FP_TRY(
        tx.QueryRow("SELECT (SELECT id FROM external_ip WHERE kind = 'floating' AND name = ? AND "
                    "time_deleted IS NULL), (SELECT id FROM instance WHERE name = ? AND "
                    "time_deleted IS NULL)",
                    fip, instance));
    if (!row || row->IsNull(0) || row->IsNull(1)) return Pair();
    auto fip_id = Uuid::Parse(row->Text(0));
    auto instance_id = Uuid::Parse(row->Text(1));
    if (!fip_id || !instance_id) return Pair();
    return Pair(std::make_pair(*fip_id, *instance_id));
  });
  return ids ? *ids : std::nullopt;
}

}  // namespace fp::sim
