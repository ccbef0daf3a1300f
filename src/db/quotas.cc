// Quotas of silos and projects.
//
// An IP quota's use is counted when it is checked, from the live external IPs that name the
// project or silo they count against (external_ip.quota_project_id and quota_silo_id, indexed
// with the address's version): a whole address counts 4 quarters, an SNAT block of 16,384
// ports 1. Counting instead of keeping a counter spares every allocation a write to one row
// per silo, which on PostgreSQL would make all of a silo's allocations conflict; the count is
// bounded by the quota it is checked against, and made only where a quota is set.

#include "db/quotas.h"

#include <fmt/format.h>

namespace fp::db {

namespace {

using model::IpQuota;
using model::IpUse;
using model::kQuartersPerAddress;

// The key of an IPv4 (5 bytes) or IPv6 (17 bytes) address: a version byte, then the address
// (IpAddr::Key).
int KeyLength(IpVersion v) { return v == IpVersion::kV4 ? 5 : 17; }

std::string_view LimitColumn(IpVersion v) {
  return v == IpVersion::kV4 ? "ipv4_quota" : "ipv6_quota";
}

// The quarters of `version` held by the silo or project `owner`.id, as an SQL expression;
// `key` is external_ip's column naming such owners.
std::string UseOf(std::string_view key, std::string_view owner, IpVersion version) {
  return fmt::format(
      "(SELECT CAST(COALESCE(SUM((e.last_port - e.first_port + 1) / 16384), 0) AS BIGINT) FROM "
      "external_ip e WHERE e.{} = {}.id AND e.time_deleted IS NULL AND length(e.ip) = {})",
      key, owner, KeyLength(version));
}

std::optional<int64_t> OptInt(const Row& r, size_t i) {
  return r.IsNull(i) ? std::nullopt : std::optional<int64_t>(r.Int(i));
}

Error QuotaExceeded(std::string_view scope, std::string_view name, IpVersion version, int64_t limit,
                    int64_t used, int64_t quarters, std::string_view purpose,
                    std::string_view who_raises) {
  return Error(ErrorKind::kQuotaExceeded,
               fmt::format("IPv{} address quota of {} \"{}\" exceeded: its limit is {}, {} in "
                           "use, and {} needs {} more; release addresses or ask {} to raise it",
                           version == IpVersion::kV4 ? 4 : 6, scope, name, limit,
                           AddressCount(used), purpose, AddressCount(quarters), who_raises));
}

Result<model::SiloQuotas> SiloQuotasFromRow(const Row& r) {
  model::SiloQuotas q;
  q.silo_id = FP_TRY(UuidColumn(r, 0));
  q.cpus = r.Int(1);
  q.memory = r.Int(2);
  q.storage = r.Int(3);
  q.ip = IpQuota{OptInt(r, 4), OptInt(r, 5)};
  q.ip_use = IpUse{r.Int(6), r.Int(7)};
  return q;
}

std::string SiloQuotasSelect() {
  return fmt::format(
      "SELECT s.id, s.cpus_quota, s.memory_quota, s.storage_quota, s.ipv4_quota, s.ipv6_quota, "
      "{}, {} FROM silo s WHERE s.time_deleted IS NULL",
      UseOf("quota_silo_id", "s", IpVersion::kV4), UseOf("quota_silo_id", "s", IpVersion::kV6));
}

Result<model::ProjectQuotas> ProjectQuotasIn(Tx& tx, const Uuid& project_id) {
  auto row = FP_TRY(tx.QueryRow(
      fmt::format("SELECT p.id, p.silo_id, p.ipv4_quota, p.ipv6_quota, {}, {} FROM project p "
                  "WHERE p.id = ? AND p.time_deleted IS NULL",
                  UseOf("quota_project_id", "p", IpVersion::kV4),
                  UseOf("quota_project_id", "p", IpVersion::kV6)),
      project_id));
  if (!row) return Fail(Error::NotFoundById("project", project_id.ToString()));
  model::ProjectQuotas q;
  q.project_id = FP_TRY(UuidColumn(*row, 0));
  q.silo_id = FP_TRY(UuidColumn(*row, 1));
  q.ip = IpQuota{OptInt(*row, 2), OptInt(*row, 3)};
  q.ip_use = IpUse{row->Int(4), row->Int(5)};
  return q;
}

}  // namespace

std::string AddressCount(int64_t quarters) {
  int64_t whole = quarters / kQuartersPerAddress;
  switch (quarters % kQuartersPerAddress) {
    case 1:
      return fmt::format("{}.25", whole);
    case 2:
      return fmt::format("{}.5", whole);
    case 3:
      return fmt::format("{}.75", whole);
    default:
      return fmt::format("{}", whole);
  }
}

namespace {

// `owner`: the SQL selecting the project's id, with one parameter, `id`.
Result<QuotaHolder> CheckIpQuotaIn(Tx& tx, std::string_view owner, const Uuid& id,
                                   const IpCharge& c) {
  std::string_view limit = LimitColumn(c.version);
  auto row = FP_TRY(
      tx.QueryRow(fmt::format("SELECT p.id, s.id, p.name, p.{0}, s.name, s.{0}, "
                              "CASE WHEN p.{0} IS NULL THEN 0 ELSE {1} END, "
                              "CASE WHEN s.{0} IS NULL THEN 0 ELSE {2} END "
                              "FROM project p JOIN silo s ON s.id = p.silo_id WHERE p.id = ({3})",
                              limit, UseOf("quota_project_id", "p", c.version),
                              UseOf("quota_silo_id", "s", c.version), owner),
                  id));
  if (!row) {
    return Fail(Error::Internal(
        fmt::format("no project found for the IP quota check of {}", id.ToString())));
  }
  // The silo's first: a silo admin cannot raise it, so it is the one to name when both bind.
  if (auto silo_limit = OptInt(*row, 5); silo_limit && c.silo) {
    int64_t used = row->Int(7);
    if (used + c.quarters > *silo_limit * kQuartersPerAddress) {
      return Fail(QuotaExceeded("silo", row->Text(4), c.version, *silo_limit, used, c.quarters,
                                c.purpose, "a fleet admin"));
    }
  }
  if (auto project_limit = OptInt(*row, 3)) {
    int64_t used = row->Int(6);
    if (used + c.quarters > *project_limit * kQuartersPerAddress) {
      return Fail(QuotaExceeded("project", row->Text(2), c.version, *project_limit, used,
                                c.quarters, c.purpose, "a silo admin"));
    }
  }
  return QuotaHolder{FP_TRY(UuidColumn(*row, 0)), FP_TRY(UuidColumn(*row, 1))};
}

}  // namespace

Result<QuotaHolder> CheckProjectIpQuotaIn(Tx& tx, const Uuid& project_id, const IpCharge& c) {
  return CheckIpQuotaIn(tx, "?", project_id, c);
}

Result<QuotaHolder> CheckInstanceIpQuotaIn(Tx& tx, const Uuid& instance_id, const IpCharge& c) {
  return CheckIpQuotaIn(tx, "SELECT project_id FROM instance WHERE id = ?", instance_id, c);
}

Result<model::SiloQuotas> SiloQuotasIn(Tx& tx, const Uuid& silo_id) {
  auto row = FP_TRY(tx.QueryRow(SiloQuotasSelect() + " AND s.id = ?", silo_id));
  if (!row) return Fail(Error::NotFoundById("silo", silo_id.ToString()));
  return SiloQuotasFromRow(*row);
}

Result<model::SiloQuotas> SiloQuotasView(Datastore& ds, const Uuid& silo_id) {
  return ds.Read<model::SiloQuotas>([&](Tx& tx) { return SiloQuotasIn(tx, silo_id); });
}

Result<std::vector<model::SiloQuotas>> SiloQuotasList(Datastore& ds,
                                                      const model::PageRequest& page) {
  return ds.Read<std::vector<model::SiloQuotas>>(
      [&](Tx& tx) -> Result<std::vector<model::SiloQuotas>> {
        std::vector<SqlValue> params;
        std::string sql = SiloQuotasSelect() + PageClause(page, "s.id", "s.id", params);
        std::vector<model::SiloQuotas> out;
        for (const Row& r : FP_TRY(tx.QueryV(sql, params))) {
          out.push_back(FP_TRY(SiloQuotasFromRow(r)));
        }
        return out;
      });
}

Result<model::SiloQuotas> SiloQuotasUpdate(Datastore& ds, const Uuid& silo_id,
                                           const model::SiloQuotasUpdate& u,
                                           const Effect<model::SiloQuotas>& effect) {
  return ds.Write<model::SiloQuotas>(effect, [&](Tx& tx) -> Result<model::SiloQuotas> {
    model::SiloQuotas q = FP_TRY(SiloQuotasIn(tx, silo_id));
    q.cpus = u.cpus.value_or(q.cpus);
    q.memory = u.memory.value_or(q.memory);
    q.storage = u.storage.value_or(q.storage);
    if (u.ipv4) q.ip.ipv4 = *u.ipv4;
    if (u.ipv6) q.ip.ipv6 = *u.ipv6;
    FP_TRY(tx.Exec(
        "UPDATE silo SET cpus_quota = ?, memory_quota = ?, storage_quota = ?, ipv4_quota = ?, "
        "ipv6_quota = ? WHERE id = ?",
        q.cpus, q.memory, q.storage, q.ip.ipv4, q.ip.ipv6, silo_id));
    return q;
  });
}

Result<model::ProjectQuotas> ProjectQuotasView(Datastore& ds, const Uuid& project_id) {
  return ds.Read<model::ProjectQuotas>([&](Tx& tx) { return ProjectQuotasIn(tx, project_id); });
}

Result<model::ProjectQuotas> ProjectQuotasUpdate(Datastore& ds, const Uuid& project_id,
                                                 const model::ProjectQuotasUpdate& u,
                                                 const Effect<model::ProjectQuotas>& effect) {
  return ds.Write<model::ProjectQuotas>(effect, [&](Tx& tx) -> Result<model::ProjectQuotas> {
    model::ProjectQuotas q = FP_TRY(ProjectQuotasIn(tx, project_id));
    if (u.ipv4) q.ip.ipv4 = *u.ipv4;
    if (u.ipv6) q.ip.ipv6 = *u.ipv6;
    FP_TRY(tx.Exec("UPDATE project SET ipv4_quota = ?, ipv6_quota = ? WHERE id = ?", q.ip.ipv4,
                   q.ip.ipv6, project_id));
    return q;
  });
}

}  // namespace fp::db
