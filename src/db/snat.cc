#include "db/snat.h"

#include <fmt/format.h>

#include "db/external_ips.h"
#include "db/ip_allocation.h"
#include "db/quotas.h"

namespace fp::db {

namespace {
constexpr std::string_view kDefaultPool =
    "SELECT l.ip_pool_id FROM ip_pool_silo_link l JOIN ip_pool p ON p.id = l.ip_pool_id "
    "WHERE l.silo_id = ? AND l.is_default = 1 AND l.pool_type = 'unicast' AND "
    "l.ip_version = ? AND p.time_deleted IS NULL AND p.assignment = 'silos'";
}  // namespace

Result<bool> SiloHasDefaultPoolIn(Tx& tx, const Uuid& silo_id, IpVersion version) {
  return FP_TRY(tx.QueryRow(kDefaultPool, silo_id, std::string(ToString(version)))).has_value();
}

namespace {

// SnatAllocateIn, or with `if_room` SnatAllocateIfRoomIn: nothing (and nothing written) when
// the quotas or the pool have no room.
Result<std::optional<ExternalIp>> AllocateSnatIn(Tx& tx, const Uuid& snat_id,
                                                 const Uuid& instance_id, const Uuid& silo_id,
                                                 IpVersion version, bool if_room) {
  auto existing = FP_TRY(tx.QueryRow("SELECT time_deleted FROM external_ip WHERE id = ?", snat_id));
  if (existing) {
    if (!existing->IsNull(0)) {
      // Never revive a released row (product.md difference 4).
      return Fail(Error::Internal("SNAT allocation re-run after its row was released"));
    }
    return std::optional<ExternalIp>(FP_TRY(ExternalIpGetIn(tx, snat_id)));
  }
  const bool v4 = version == IpVersion::kV4;
  const std::string_view purpose =
      v4 ? "the instance's SNAT block" : "the instance's IPv6 SNAT block";
  if (if_room) {
    // Checked before the allocation, which would otherwise stay written in this transaction.
    auto fits = CheckInstanceIpQuotaIn(tx, instance_id, IpCharge{version, 1, purpose});
    if (!fits && fits.error().kind() == ErrorKind::kQuotaExceeded)
      return std::optional<ExternalIp>();
    FP_TRY(fits);
  }
  auto pool = FP_TRY(tx.QueryRow(kDefaultPool, silo_id, std::string(ToString(version))));
  if (!pool) {
    return Fail(Error::NotFound(
        fmt::format("default unicast IPv{} pool for current silo", v4 ? '4' : '6')));
  }
  Uuid pool_id = FP_TRY(UuidColumn(*pool, 0));
  auto block = AllocateSnatBlock(tx, pool_id);
  if (!block && if_room && block.error().kind() == ErrorKind::kInsufficientCapacity) {
    return std::optional<ExternalIp>();  // none free: nothing was written
  }
  if (!block) {
    return Fail(NoneFreeIn(tx, block.error(), pool_id,
                           v4 ? "for the instance's SNAT address (every instance with an IPv4 "
                                "interface takes a quarter of an address from the silo's default "
                                "IPv4 pool)"
                              : "for the instance's IPv6 SNAT address (every dual-stack instance "
                                "takes a quarter of an address from the silo's default IPv6 pool, "
                                "when the silo has one)"));
  }
  AllocatedAddress a = *block;
  QuotaHolder holder = FP_TRY(CheckInstanceIpQuotaIn(
      tx, instance_id,
      IpCharge{a.ip.version(), (a.last_port - a.first_port + 1) / 16384, purpose}));
  FP_TRY(
      tx.Exec("INSERT INTO external_ip (id, ip_pool_id, ip_pool_range_id, parent_id, kind, ip, "
              "first_port, last_port, state, time_created, time_modified, quota_project_id, "
              "quota_silo_id) VALUES (?, ?, ?, ?, 'snat', ?, ?, ?, 'attached', ?, ?, ?, ?)",
              snat_id, pool_id, a.range_id, instance_id, a.ip, a.first_port, a.last_port, tx.now(),
              tx.now(), holder.project_id, holder.silo_id));
  return std::optional<ExternalIp>(FP_TRY(ExternalIpGetIn(tx, snat_id)));
}

}  // namespace

Result<ExternalIp> SnatAllocateIn(Tx& tx, const Uuid& snat_id, const Uuid& instance_id,
                                  const Uuid& silo_id, IpVersion version) {
  return *FP_TRY(AllocateSnatIn(tx, snat_id, instance_id, silo_id, version, false));
}

Result<std::optional<ExternalIp>> SnatAllocateIfRoomIn(Tx& tx, const Uuid& snat_id,
                                                       const Uuid& instance_id, const Uuid& silo_id,
                                                       IpVersion version) {
  return AllocateSnatIn(tx, snat_id, instance_id, silo_id, version, true);
}

}  // namespace fp::db
