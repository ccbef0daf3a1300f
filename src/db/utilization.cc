#include "db/utilization.h"

#include <fmt/format.h>

#include "db/ip_pools.h"
#include "db/quotas.h"

namespace fp::db {

namespace {

Result<model::SiloUtilization> SiloUtilizationIn(Tx& tx, const Uuid& silo_id, std::string name) {
  model::SiloUtilization u;
  u.silo_id = silo_id;
  u.silo_name = std::move(name);
  u.quotas = FP_TRY(SiloQuotasIn(tx, silo_id));
  // Oxide counts the CPUs and memory of instances that have a VMM (starting to stopping).
  auto provisioned = FP_TRY(tx.QueryRow(
      "SELECT CAST(COALESCE(SUM(i.ncpus), 0) AS BIGINT), CAST(COALESCE(SUM(i.memory), 0) AS "
      "BIGINT) FROM instance i JOIN project p ON p.id = i.project_id WHERE p.silo_id = ? AND "
      "i.time_deleted IS NULL AND i.state = 'vmm'",
      silo_id));
  if (provisioned) u.provisioned = {provisioned->Int(0), provisioned->Int(1), 0};
  // Only the silo's own holdings (quota_silo_id): other silos' stay unseen.
  constexpr std::string_view kHeld =
      "(SELECT COUNT(*) FROM external_ip e WHERE e.quota_silo_id = l.silo_id AND "
      "e.ip_pool_id = p.id AND e.time_deleted IS NULL AND e.kind = '{}')";
  for (const Row& r : FP_TRY(tx.Query(
           fmt::format("SELECT p.id, p.name, p.ip_version, {}, {}, {} FROM ip_pool_silo_link l "
                       "JOIN ip_pool p ON p.id = l.ip_pool_id WHERE l.silo_id = ? AND "
                       "p.time_deleted IS NULL ORDER BY p.name",
                       fmt::format(fmt::runtime(kHeld), "floating"),
                       fmt::format(fmt::runtime(kHeld), "ephemeral"),
                       fmt::format(fmt::runtime(kHeld), "snat")),
           silo_id))) {
    model::SiloPoolUse use;
    use.pool_id = FP_TRY(UuidColumn(r, 0));
    use.pool_name = r.Text(1);
    auto version = ParseIpVersion(r.Text(2));
    if (!version) return Fail(Error::Internal("pool " + r.Text(1) + " has no IP version"));
    use.ip_version = *version;
    use.floating = r.Int(3);
    use.ephemeral = r.Int(4);
    use.snat_blocks = r.Int(5);
    model::PoolUtilization pool = FP_TRY(PoolUtilizationIn(tx, use.pool_id));
    use.capacity = pool.capacity;
    use.remaining = pool.remaining;
    u.pools.push_back(std::move(use));
  }
  return u;
}

}  // namespace

Result<model::SiloUtilization> SiloUtilizationView(Datastore& ds, const Uuid& silo_id) {
  return ds.Read<model::SiloUtilization>([&](Tx& tx) -> Result<model::SiloUtilization> {
    auto row =
        FP_TRY(tx.QueryRow("SELECT name FROM silo WHERE id = ? AND time_deleted IS NULL", silo_id));
    if (!row) return Fail(Error::NotFoundById("silo", silo_id.ToString()));
    return SiloUtilizationIn(tx, silo_id, row->Text(0));
  });
}

Result<std::vector<model::SiloUtilization>> SiloUtilizationList(Datastore& ds,
                                                                const model::PageRequest& page) {
  return ds.Read<std::vector<model::SiloUtilization>>(
      [&](Tx& tx) -> Result<std::vector<model::SiloUtilization>> {
        std::vector<SqlValue> params;
        std::string sql = "SELECT id, name FROM silo WHERE time_deleted IS NULL" +
                          PageClause(page, "name", "id", params);
        std::vector<model::SiloUtilization> out;
        for (const Row& r : FP_TRY(tx.QueryV(sql, params))) {
          out.push_back(FP_TRY(SiloUtilizationIn(tx, FP_TRY(UuidColumn(r, 0)), r.Text(1))));
        }
        return out;
      });
}

}  // namespace fp::db
