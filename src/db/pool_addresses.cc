// Who holds which address of a pool: the allocations with their instance, project and silo.

#include "db/pool_addresses.h"

#include <fmt/format.h>

#include <string>

#include "db/external_ips.h"

namespace fp::db {

namespace {

// An allocated address with its holder: the instance it is attached to (for SNAT and
// ephemeral addresses always), and the project (a floating IP's own, else its instance's) and
// silo of either. `WHERE` conditions follow.
constexpr std::string_view kPoolAddressSelect =
    "SELECT e.id, e.ip, e.kind, e.first_port, e.last_port, e.ip_pool_range_id, e.name, "
    "e.time_created, i.id, i.name, p.id, p.name, s.id, s.name FROM external_ip e "
    "LEFT JOIN instance i ON i.id = e.parent_id "
    "LEFT JOIN project p ON p.id = COALESCE(e.project_id, i.project_id) "
    "LEFT JOIN silo s ON s.id = p.silo_id "
    "WHERE e.time_deleted IS NULL AND ";

Result<PoolAddress> PoolAddressOf(const Row& r) {
  PoolAddress a;
  a.external_ip_id = FP_TRY(UuidColumn(r, 0));
  a.ip = FP_TRY(IpColumn(r, 1));
  a.kind = FP_TRY(IpKindColumn(r, 2));
  a.first_port = static_cast<int>(r.Int(3));
  a.last_port = static_cast<int>(r.Int(4));
  a.range_id = FP_TRY(UuidColumn(r, 5));
  if (!r.IsNull(6)) a.name = r.Text(6);
  a.time_created = r.Int(7);
  if (!r.IsNull(8)) {
    a.instance_id = FP_TRY(UuidColumn(r, 8));
    a.instance_name = r.Text(9);
  }
  if (!r.IsNull(10)) {
    a.project_id = FP_TRY(UuidColumn(r, 10));
    a.project_name = r.Text(11);
  }
  if (!r.IsNull(12)) {
    a.silo_id = FP_TRY(UuidColumn(r, 12));
    a.silo_name = r.Text(13);
  }
  return a;
}

// Who holds an address, in a message: `floating IP "web" (10.0.0.1)`, `the SNAT of instance
// "vm" (10.0.0.0 ports 0-16383)`, `the ephemeral IP of instance "vm" (10.0.0.7)`.
std::string DescribeHolder(const PoolAddress& a) {
  const std::string instance =
      a.instance_name ? fmt::format("instance \"{}\"", *a.instance_name) : "an instance";
  switch (a.kind) {
    case IpKind::kFloating:
      return fmt::format("floating IP \"{}\" ({})", a.name.value_or(""), a.ip.ToString());
    case IpKind::kSnat:
      return fmt::format("the SNAT of {} ({} ports {}-{})", instance, a.ip.ToString(), a.first_port,
                         a.last_port);
    case IpKind::kEphemeral:
      break;
  }
  return fmt::format("the ephemeral IP of {} ({})", instance, a.ip.ToString());
}

}  // namespace

Result<std::vector<PoolAddress>> PoolAddresses(Datastore& ds, const Uuid& pool_id,
                                               const PoolAddressPage& page) {
  return ds.Read<std::vector<PoolAddress>>([&](Tx& tx) -> Result<std::vector<PoolAddress>> {
    if (!FP_TRY(
            tx.QueryRow("SELECT 1 FROM ip_pool WHERE id = ? AND time_deleted IS NULL", pool_id))) {
      return Fail(Error::NotFoundById("ip-pool", pool_id.ToString()));
    }
    std::string sql = std::string(kPoolAddressSelect) + "e.ip_pool_id = ?";
    std::vector<SqlValue> args{Tx::ToSql(pool_id)};
    if (page.range) {
      auto row = FP_TRY(
          tx.QueryRow("SELECT id FROM ip_pool_range WHERE ip_pool_id = ? AND first_address = ? AND "
                      "last_address = ? AND time_deleted IS NULL",
                      pool_id, page.range->first, page.range->last));
      if (!row) {
        return Fail(Error::InvalidRequest(
            fmt::format("The provided range {} does not exist", page.range->ToString())));
      }
      sql += " AND e.ip_pool_range_id = ?";
      args.push_back(row->Text(0));
    }
    if (page.after) {
      sql += " AND (e.ip, e.first_port) > (?, ?)";
      args.push_back(Tx::ToSql(page.after->first));
      args.push_back(int64_t{page.after->second});
    }
    sql += " ORDER BY e.ip, e.first_port LIMIT ?";
    args.push_back(page.limit);
    std::vector<PoolAddress> out;
    for (const Row& r : FP_TRY(tx.QueryV(sql, args))) out.push_back(FP_TRY(PoolAddressOf(r)));
    return out;
  });
}

Result<std::vector<std::string>> FirstHoldersIn(Tx& tx, const Uuid& range_id, int64_t n) {
  std::vector<std::string> out;
  for (const Row& r : FP_TRY(tx.Query(std::string(kPoolAddressSelect) +
                                          "e.ip_pool_range_id = ? ORDER BY e.ip, e.first_port "
                                          "LIMIT ?",
                                      range_id, n))) {
    out.push_back(DescribeHolder(FP_TRY(PoolAddressOf(r))));
  }
  return out;
}

}  // namespace fp::db
