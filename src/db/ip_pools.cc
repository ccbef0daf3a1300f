#include "db/ip_pools.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <string>

#include "db/external_ips.h"
#include "db/ip_allocation.h"
#include "db/pool_addresses.h"
#include "db/silos.h"

namespace fp::db {

namespace {

constexpr std::string_view kPoolColumns =
    "p.id, p.name, p.description, p.ip_version, p.pool_type, p.assignment, p.time_created, "
    "p.time_modified";

Result<IpPool> PoolFromRow(const Row& r) {
  IpPool p;
  p.id = FP_TRY(UuidColumn(r, 0));
  p.name = r.Text(1);
  p.description = r.Text(2);
  auto version = ParseIpVersion(r.Text(3));
  auto type = ParsePoolType(r.Text(4));
  auto assignment = ParsePoolAssignment(r.Text(5));
  if (!version || !type || !assignment) return Fail(Error::Internal("corrupt ip_pool row"));
  p.ip_version = *version;
  p.pool_type = *type;
  p.assignment = *assignment;
  p.time_created = r.Int(6);
  p.time_modified = r.Int(7);
  return p;
}

Result<IpPool> PoolById(Tx& tx, const Uuid& id) {
  auto row = FP_TRY(
      tx.QueryRow(fmt::format("SELECT {} FROM ip_pool p WHERE p.id = ? AND p.time_deleted IS NULL",
                              kPoolColumns),
                  id));
  if (!row) return Fail(Error::NotFoundById("ip-pool", id.ToString()));
  return PoolFromRow(*row);
}

// Appends the optional pool filters as SQL conditions on the alias `p`.
std::string FilterClause(const IpPoolFilter& f, std::vector<SqlValue>& params) {
  std::string sql;
  if (f.ip_version) {
    sql += " AND p.ip_version = ?";
    params.emplace_back(std::string(ToString(*f.ip_version)));
  }
  if (f.pool_type) {
    sql += " AND p.pool_type = ?";
    params.emplace_back(std::string(ToString(*f.pool_type)));
  }
  if (f.assignment) {
    sql += " AND p.assignment = ?";
    params.emplace_back(std::string(ToString(*f.assignment)));
  }
  return sql;
}

bool IsMulticast(const IpAddr& a) {
  if (a.version() == IpVersion::kV4) return (a.value() >> 28) == 0xe;  // 224.0.0.0/4
  return (a.value() >> 120) == 0xff;                                   // ff00::/8
}

Error LinkNotFound(const Uuid& pool_id, const Uuid& silo_id) {
  return Error::NotFoundById(
      "ip-pool-resource",
      fmt::format("ip_pool_id: {}, silo_id: {}", pool_id.ToString(), silo_id.ToString()));
}

Error LinkExists(const Uuid& pool_id, const Uuid& silo_id) {
  return Error::AlreadyExists("ip-pool-resource",
                              fmt::format("ip_pool_id: {}, resource_id: {}, resource_type: Silo",
                                          pool_id.ToString(), silo_id.ToString()));
}

// The live range of any pool that overlaps `range`, if there is one. Ranges never overlap,
// so two index probes suffice: a range starting inside `range`, or the range with the
// greatest start at or below range.first (which overlaps iff it reaches range.first).
Result<std::optional<IpRange>> FindOverlappingRange(Tx& tx, const IpRange& range) {
  auto inside = FP_TRY(tx.QueryRow(
      "SELECT first_address, last_address FROM ip_pool_range WHERE time_deleted IS NULL AND "
      "first_address >= ? AND first_address <= ? ORDER BY first_address LIMIT 1",
      range.first, range.last));
  if (!inside) {
    inside = FP_TRY(tx.QueryRow(
        "SELECT first_address, last_address FROM ip_pool_range WHERE time_deleted IS NULL AND "
        "first_address <= ? AND last_address >= ? ORDER BY first_address DESC LIMIT 1",
        range.first, range.first));
  }
  if (!inside) return std::optional<IpRange>();
  return std::optional<IpRange>(
      IpRange{FP_TRY(IpColumn(*inside, 0)), FP_TRY(IpColumn(*inside, 1))});
}

}  // namespace

Result<IpPool> LookupPoolIn(Tx& tx, const NameOrId& selector) {
  if (selector.is_id()) return PoolById(tx, selector.id());
  auto row = FP_TRY(tx.QueryRow(
      fmt::format("SELECT {} FROM ip_pool p WHERE p.name = ? AND p.time_deleted IS NULL",
                  kPoolColumns),
      selector.name().str()));
  if (!row) return Fail(Error::NotFoundByName("ip-pool", selector.name().str()));
  return PoolFromRow(*row);
}

Result<std::optional<std::string>> PoolNotLinkedTo(Datastore& ds, const NameOrId& selector,
                                                   const Uuid& silo_id) {
  using Out = std::optional<std::string>;
  return ds.Read<Out>([&](Tx& tx) -> Result<Out> {
    auto pool = LookupPoolIn(tx, selector);
    if (!pool) {
      if (pool.error().kind() == ErrorKind::kNotFound) return Out();
      return Fail(pool.error());
    }
    auto row = FP_TRY(tx.QueryRow(
        "SELECT s.name, (SELECT count(*) FROM ip_pool_silo_link l WHERE l.ip_pool_id = ? AND "
        "l.silo_id = s.id) FROM silo s WHERE s.id = ?",
        pool->id, silo_id));
    if (!row || row->Int(1) > 0) return Out();
    return Out(row->Text(0));
  });
}

Result<IpPool> PoolCreate(Datastore& ds, const model::PoolCreate& p,
                          const Effect<model::IpPool>& effect) {
  return ds.Write<IpPool>(effect, [&](Tx& tx) -> Result<IpPool> {
    auto dup = FP_TRY(
        tx.QueryRow("SELECT 1 FROM ip_pool WHERE name = ? AND time_deleted IS NULL", p.name));
    if (dup) return Fail(Error::AlreadyExists("ip-pool", p.name));
    FP_TRY(
        tx.Exec("INSERT INTO ip_pool (id, name, description, ip_version, pool_type, assignment, "
                "time_created, time_modified) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                p.id, p.name, p.description, ToString(p.ip_version), ToString(p.pool_type),
                ToString(p.assignment), tx.now(), tx.now()));
    return IpPool{p.id,        p.name,       p.description, p.ip_version,
                  p.pool_type, p.assignment, tx.now(),      tx.now()};
  });
}

Result<IpPool> PoolLookup(Datastore& ds, const NameOrId& selector) {
  return ds.Read<IpPool>([&](Tx& tx) { return LookupPoolIn(tx, selector); });
}

Result<std::vector<IpPool>> PoolList(Datastore& ds, const IpPoolFilter& filter,
                                     const PageRequest& page) {
  return ds.Read<std::vector<IpPool>>([&](Tx& tx) -> Result<std::vector<IpPool>> {
    std::vector<SqlValue> params;
    std::string sql =
        fmt::format("SELECT {} FROM ip_pool p WHERE p.time_deleted IS NULL", kPoolColumns);
    sql += FilterClause(filter, params);
    sql += PageClause(page, "p.name", "p.id", params);
    std::vector<IpPool> out;
    for (const Row& r : FP_TRY(tx.QueryV(sql, params))) out.push_back(FP_TRY(PoolFromRow(r)));
    return out;
  });
}

Result<IpPool> PoolUpdate(Datastore& ds, const Uuid& id, const IdentityUpdate& update,
                          const Effect<model::IpPool>& effect) {
  return ds.Write<IpPool>(effect, [&](Tx& tx) -> Result<IpPool> {
    IpPool p = FP_TRY(PoolById(tx, id));
    if (update.name && *update.name != p.name) {
      auto dup = FP_TRY(tx.QueryRow("SELECT 1 FROM ip_pool WHERE name = ? AND time_deleted IS NULL",
                                    *update.name));
      if (dup) return Fail(Error::AlreadyExists("ip-pool", *update.name));
      p.name = *update.name;
    }
    if (update.description) p.description = *update.description;
    p.time_modified = tx.now();
    FP_TRY(tx.Exec("UPDATE ip_pool SET name = ?, description = ?, time_modified = ? WHERE id = ?",
                   p.name, p.description, p.time_modified, id));
    return p;
  });
}

Status PoolDelete(Datastore& ds, const Uuid& id, const Effect<void>& effect) {
  return ds.Write(effect, [&](Tx& tx) -> Status {
    FP_TRY(PoolById(tx, id));
    auto range = FP_TRY(tx.QueryRow(
        "SELECT 1 FROM ip_pool_range WHERE ip_pool_id = ? AND time_deleted IS NULL LIMIT 1", id));
    if (range) {
      return Fail(Error::InvalidRequest("IP Pool cannot be deleted while it contains IP ranges"));
    }
    ds.SyncPoint("ip_pool_delete:checked");
    FP_TRY(tx.Exec("DELETE FROM ip_pool_silo_link WHERE ip_pool_id = ?", id));
    FP_TRY(tx.Exec("UPDATE ip_pool SET time_deleted = ? WHERE id = ?", tx.now(), id));
    return Ok();
  });
}

Result<std::vector<IpPoolRange>> RangeList(Datastore& ds, const Uuid& pool_id,
                                           std::optional<IpAddr> after, int64_t limit) {
  return ds.Read<std::vector<IpPoolRange>>([&](Tx& tx) -> Result<std::vector<IpPoolRange>> {
    FP_TRY(PoolById(tx, pool_id));
    auto rows =
        FP_TRY(tx.Query("SELECT id, first_address, last_address, time_created FROM ip_pool_range "
                        "WHERE ip_pool_id = ? AND time_deleted IS NULL AND first_address > ? "
                        "ORDER BY first_address LIMIT ?",
                        pool_id, after ? SqlValue(Blob{after->Key()}) : SqlValue(Blob{}), limit));
    std::vector<IpPoolRange> out;
    for (const Row& r : rows) {
      out.push_back(IpPoolRange{FP_TRY(UuidColumn(r, 0)), pool_id,
                                IpRange{FP_TRY(IpColumn(r, 1)), FP_TRY(IpColumn(r, 2))}, r.Int(3)});
    }
    return out;
  });
}

Result<IpPoolRange> RangeAdd(Datastore& ds, const Uuid& pool_id, const Uuid& range_id,
                             const IpRange& range, const Effect<model::IpPoolRange>& effect) {
  return ds.Write<IpPoolRange>(effect, [&](Tx& tx) -> Result<IpPoolRange> {
    IpPool pool = FP_TRY(PoolById(tx, pool_id));
    bool first_mc = IsMulticast(range.first);
    if (first_mc != IsMulticast(range.last)) {
      return Fail(
          Error::InvalidRequest("IP range cannot span multicast and unicast address spaces"));
    }
    if (first_mc && pool.pool_type == PoolType::kUnicast) {
      return Fail(Error::InvalidRequest("Cannot add multicast address range to unicast IP pool"));
    }
    if (!first_mc && pool.pool_type == PoolType::kMulticast) {
      return Fail(Error::InvalidRequest("Cannot add unicast address range to multicast IP pool"));
    }
    if (range.version() != pool.ip_version) {
      return Fail(Error::InvalidRequest(
          fmt::format("Cannot add {} address range to {} pool with ID \"{}\"",
                      Label(range.version()), Label(pool.ip_version), pool_id.ToString())));
    }
    auto overlap = FP_TRY(FindOverlappingRange(tx, range));
    if (overlap) {
      return Fail(Error::InvalidRequest(fmt::format(
          "The provided IP range {} overlaps with an existing IP pool range or subnet pool member",
          range.ToString())));
    }
    ds.SyncPoint("ip_range_add:checked");
    FP_TRY(tx.Exec(
        "INSERT INTO ip_pool_range (id, ip_pool_id, first_address, last_address, time_created, "
        "time_modified) VALUES (?, ?, ?, ?, ?, ?)",
        range_id, pool_id, range.first, range.last, tx.now(), tx.now()));
    FP_TRY(
        tx.Exec("INSERT INTO ip_free_span (range_id, pool_id, first_address, last_address) "
                "VALUES (?, ?, ?, ?)",
                range_id, pool_id, range.first, range.last));
    FP_TRY(tx.Exec("UPDATE ip_pool SET time_modified = ? WHERE id = ?", tx.now(), pool_id));
    return IpPoolRange{range_id, pool_id, range, tx.now()};
  });
}

Status RangeRemove(Datastore& ds, const Uuid& pool_id, const IpRange& range,
                   const Effect<void>& effect) {
  return ds.Write(effect, [&](Tx& tx) -> Status {
    IpPool pool = FP_TRY(PoolById(tx, pool_id));
    auto row = FP_TRY(
        tx.QueryRow("SELECT id FROM ip_pool_range WHERE ip_pool_id = ? AND first_address = ? AND "
                    "last_address = ? AND time_deleted IS NULL",
                    pool_id, range.first, range.last));
    if (!row) {
      return Fail(Error::InvalidRequest(
          fmt::format("The provided range {} does not exist", range.ToString())));
    }
    Uuid range_id = FP_TRY(UuidColumn(*row, 0));
    auto held = FP_TRY(tx.QueryRow(
        "SELECT COUNT(*) FROM external_ip WHERE ip_pool_range_id = ? AND time_deleted IS NULL",
        range_id));
    if (held && held->Int(0) > 0) {
      // How many allocations (an address shared by SNAT blocks counts once per block), and the
      // first holders: what the operator must free first (GET .../addresses lists them all).
      constexpr int kNamed = 3;
      std::vector<std::string> first = FP_TRY(FirstHoldersIn(tx, range_id, kNamed));
      const int64_t count = held->Int(0);
      return Fail(Error::InvalidRequest(fmt::format(
          "IP pool ranges cannot be deleted while external IP addresses are allocated from them: "
          "{} {} {} in {}: {}{}",
          count, count == 1 ? "allocation" : "allocations", count == 1 ? "remains" : "remain",
          range.ToString(), fmt::join(first, ", "),
          count > kNamed
              ? fmt::format(", ... (all of them: GET /v1/system/ip-pools/{}/addresses)", pool.name)
              : "")));
    }
    ds.SyncPoint("ip_range_remove:checked");
    FP_TRY(tx.Exec("DELETE FROM ip_free_span WHERE range_id = ?", range_id));
    FP_TRY(tx.Exec("UPDATE ip_pool_range SET time_deleted = ? WHERE id = ?", tx.now(), range_id));
    return Ok();
  });
}

Result<std::vector<SiloLink>> LinkList(Datastore& ds, const Uuid& pool_id,
                                       std::optional<Uuid> after, int64_t limit) {
  return ds.Read<std::vector<SiloLink>>([&](Tx& tx) -> Result<std::vector<SiloLink>> {
    FP_TRY(PoolById(tx, pool_id));
    auto rows = FP_TRY(tx.Query(
        "SELECT l.silo_id, l.is_default FROM ip_pool_silo_link l JOIN silo s ON s.id = l.silo_id "
        "WHERE l.ip_pool_id = ? AND s.time_deleted IS NULL AND l.silo_id > ? "
        "ORDER BY l.silo_id LIMIT ?",
        pool_id, after ? after->ToString() : std::string(), limit));
    std::vector<SiloLink> out;
    for (const Row& r : rows)
      out.push_back(SiloLink{pool_id, FP_TRY(UuidColumn(r, 0)), r.Int(1) != 0});
    return out;
  });
}

Result<SiloLink> Link(Datastore& ds, const Uuid& pool_id, const NameOrId& silo_selector,
                      bool is_default, const Effect<model::SiloLink>& effect) {
  return ds.Write<SiloLink>(effect, [&](Tx& tx) -> Result<SiloLink> {
    IpPool pool = FP_TRY(PoolById(tx, pool_id));
    Silo silo = FP_TRY(LookupSiloIn(tx, silo_selector));
    if (pool.assignment != PoolAssignment::kSilos) {
      return Fail(Error::InvalidRequest(
          "IP Pools cannot be both linked to Silos and assigned for system services use."));
    }
    auto existing = FP_TRY(tx.QueryRow(
        "SELECT 1 FROM ip_pool_silo_link WHERE ip_pool_id = ? AND silo_id = ?", pool_id, silo.id));
    if (existing) return Fail(LinkExists(pool_id, silo.id));
    if (is_default) {
      auto other = FP_TRY(tx.QueryRow(
          "SELECT p.name FROM ip_pool_silo_link l JOIN ip_pool p ON p.id = l.ip_pool_id "
          "WHERE l.silo_id = ? AND l.pool_type = ? AND l.ip_version = ? AND l.is_default = 1",
          silo.id, ToString(pool.pool_type), ToString(pool.ip_version)));
      if (other) {
        // Oxide's status and code (ObjectAlreadyExists), with what to do instead.
        return Fail(
            Error(ErrorKind::kObjectAlreadyExists,
                  fmt::format("silo \"{}\" already has a default {} {} pool, \"{}\": link \"{}\" "
                              "with is_default false, then set is_default on that link (PUT "
                              "/v1/system/ip-pools/{}/silos/{}), which makes \"{}\" no longer the "
                              "default",
                              silo.name, ToString(pool.pool_type), Label(pool.ip_version),
                              other->Text(0), pool.name, pool.name, silo.name, other->Text(0))));
      }
    }
    ds.SyncPoint("ip_pool_link:checked");
    FP_TRY(tx.Exec(
        "INSERT INTO ip_pool_silo_link (ip_pool_id, silo_id, is_default, pool_type, ip_version) "
        "VALUES (?, ?, ?, ?, ?)",
        pool_id, silo.id, is_default, ToString(pool.pool_type), ToString(pool.ip_version)));
    return SiloLink{pool_id, silo.id, is_default};
  });
}

Result<SiloLink> LinkUpdate(Datastore& ds, const Uuid& pool_id, const Uuid& silo_id,
                            bool is_default, const Effect<model::SiloLink>& effect) {
  return ds.Write<SiloLink>(effect, [&](Tx& tx) -> Result<SiloLink> {
    auto link = FP_TRY(
        tx.QueryRow("SELECT l.is_default, l.pool_type, l.ip_version FROM ip_pool_silo_link l "
                    "JOIN ip_pool p ON p.id = l.ip_pool_id "
                    "WHERE l.ip_pool_id = ? AND l.silo_id = ? AND p.time_deleted IS NULL",
                    pool_id, silo_id));
    if (!link) return Fail(LinkNotFound(pool_id, silo_id));
    bool was_default = link->Int(0) != 0;
    if (was_default == is_default) return SiloLink{pool_id, silo_id, is_default};
    if (is_default) {
      // Demote the current default of the same type and version, then promote this link.
      FP_TRY(tx.Exec(
          "UPDATE ip_pool_silo_link SET is_default = 0 WHERE silo_id = ? AND pool_type = ? AND "
          "ip_version = ? AND is_default = 1",
          silo_id, link->Text(1), link->Text(2)));
      ds.SyncPoint("ip_pool_link_update:demoted");
    }
    FP_TRY(
        tx.Exec("UPDATE ip_pool_silo_link SET is_default = ? WHERE ip_pool_id = ? AND silo_id = ?",
                is_default, pool_id, silo_id));
    return SiloLink{pool_id, silo_id, is_default};
  });
}

Status Unlink(Datastore& ds, const Uuid& pool_id, const Uuid& silo_id, const Effect<void>& effect) {
  return ds.Write(effect, [&](Tx& tx) -> Status {
    auto link = FP_TRY(tx.QueryRow(
        "SELECT 1 FROM ip_pool_silo_link WHERE ip_pool_id = ? AND silo_id = ?", pool_id, silo_id));
    if (!link) return Fail(LinkNotFound(pool_id, silo_id));
    // Any live address of the pool held by a live resource of the silo: a floating IP of one
    // of its projects, or the SNAT or ephemeral address of an instance in one of them (a
    // floating IP attached to an instance is named as the floating IP).
    auto in_use = FP_TRY(
        tx.QueryRow("SELECT e.ip, e.kind, e.name, i.name, pr.name FROM external_ip e "
                    "LEFT JOIN instance i ON i.id = e.parent_id AND i.time_deleted IS NULL "
                    "JOIN project pr ON pr.id = CASE WHEN e.kind = 'floating' THEN e.project_id "
                    "ELSE i.project_id END "
                    "WHERE e.ip_pool_id = ? AND e.time_deleted IS NULL AND pr.silo_id = ? AND "
                    "pr.time_deleted IS NULL ORDER BY e.ip LIMIT 1",
                    pool_id, silo_id));
    if (in_use) {
      IpAddr ip = FP_TRY(IpColumn(*in_use, 0));
      const IpKind kind = FP_TRY(IpKindColumn(*in_use, 1));
      std::string holder =
          kind == IpKind::kFloating
              ? fmt::format("floating IP \"{}\" in project \"{}\" holds {}", in_use->Text(2),
                            in_use->Text(4), ip.ToString())
              : fmt::format("instance \"{}\" in project \"{}\" holds {} as its {} address",
                            in_use->Text(3), in_use->Text(4), ip.ToString(),
                            kind == IpKind::kSnat ? "SNAT" : "ephemeral");
      return Fail(Error::InvalidRequest(
          fmt::format("IP addresses from this pool are in use in the linked silo ({})", holder)));
    }
    ds.SyncPoint("ip_pool_unlink:checked");
    FP_TRY(tx.Exec("DELETE FROM ip_pool_silo_link WHERE ip_pool_id = ? AND silo_id = ?", pool_id,
                   silo_id));
    return Ok();
  });
}

Result<PoolUtilization> PoolUtilizationIn(Tx& tx, const Uuid& pool_id) {
  PoolUtilization u;
  for (const Row& r : FP_TRY(tx.Query(
           "SELECT first_address, last_address FROM ip_pool_range WHERE ip_pool_id = ? AND "
           "time_deleted IS NULL",
           pool_id))) {
    u.capacity += IpRange{FP_TRY(IpColumn(r, 0)), FP_TRY(IpColumn(r, 1))}.SizeAsDouble();
  }
  for (const Row& r : FP_TRY(tx.Query(
           "SELECT first_address, last_address FROM ip_free_span WHERE pool_id = ?", pool_id))) {
    u.remaining += IpRange{FP_TRY(IpColumn(r, 0)), FP_TRY(IpColumn(r, 1))}.SizeAsDouble();
  }
  return u;
}

Result<PoolUtilization> Utilization(Datastore& ds, const Uuid& pool_id) {
  return ds.Read<PoolUtilization>([&](Tx& tx) -> Result<PoolUtilization> {
    FP_TRY(PoolById(tx, pool_id));
    return PoolUtilizationIn(tx, pool_id);
  });
}

Result<std::vector<PoolUsage>> PoolUsageAll(Datastore& ds) {
  // Latest, not durable: a scrape must not wait for the log's sync (it would slow /metrics to
  // the disk's pace under load), and a gauge a crash undoes is harmless.
  return ds.ReadLatest<std::vector<PoolUsage>>([&](Tx& tx) -> Result<std::vector<PoolUsage>> {
    std::map<std::string, PoolUsage> by_id;
    for (const Row& r : FP_TRY(tx.Query("SELECT id, name, ip_version FROM ip_pool WHERE "
                                        "time_deleted IS NULL ORDER BY name"))) {
      by_id[r.Text(0)] = PoolUsage{.name = r.Text(1), .ip_version = r.Text(2)};
    }
    for (const Row& r : FP_TRY(tx.Query("SELECT ip_pool_id, first_address, last_address FROM "
                                        "ip_pool_range WHERE time_deleted IS NULL"))) {
      auto it = by_id.find(r.Text(0));
      if (it == by_id.end()) continue;
      it->second.capacity += IpRange{FP_TRY(IpColumn(r, 1)), FP_TRY(IpColumn(r, 2))}.SizeAsDouble();
    }
    for (const Row& r :
         FP_TRY(tx.Query("SELECT ip_pool_id, kind, count(DISTINCT ip) FROM external_ip WHERE "
                         "time_deleted IS NULL GROUP BY ip_pool_id, kind"))) {
      auto it = by_id.find(r.Text(0));
      if (it == by_id.end()) continue;
      const int64_t n = r.Int(2);
      switch (FP_TRY(IpKindColumn(r, 1))) {
        case IpKind::kFloating:
          it->second.floating = n;
          break;
        case IpKind::kEphemeral:
          it->second.ephemeral = n;
          break;
        case IpKind::kSnat:
          it->second.snat = n;
          break;
      }
    }
    std::vector<PoolUsage> out;
    for (auto& [id, usage] : by_id) out.push_back(std::move(usage));
    std::sort(out.begin(), out.end(),
              [](const PoolUsage& a, const PoolUsage& b) { return a.name < b.name; });
    return out;
  });
}

Result<std::vector<SiloIpPool>> SiloPoolList(Datastore& ds, const Uuid& silo_id,
                                             const IpPoolFilter& filter, const PageRequest& page) {
  return ds.Read<std::vector<SiloIpPool>>([&](Tx& tx) -> Result<std::vector<SiloIpPool>> {
    std::vector<SqlValue> params{silo_id.ToString()};
    std::string sql = fmt::format(
        "SELECT {}, l.is_default FROM ip_pool p JOIN ip_pool_silo_link l ON l.ip_pool_id = p.id "
        "WHERE l.silo_id = ? AND p.time_deleted IS NULL AND p.assignment = 'silos'",
        kPoolColumns);
    sql += FilterClause(filter, params);
    sql += PageClause(page, "p.name", "p.id", params);
    std::vector<SiloIpPool> out;
    for (const Row& r : FP_TRY(tx.QueryV(sql, params))) {
      out.push_back(SiloIpPool{FP_TRY(PoolFromRow(r)), r.Int(8) != 0});
    }
    return out;
  });
}

Result<SiloIpPool> SiloPoolLookup(Datastore& ds, const Uuid& silo_id, const NameOrId& selector) {
  return ds.Read<SiloIpPool>([&](Tx& tx) -> Result<SiloIpPool> {
    IpPool pool = FP_TRY(LookupPoolIn(tx, selector));
    auto link = FP_TRY(
        tx.QueryRow("SELECT is_default FROM ip_pool_silo_link WHERE ip_pool_id = ? AND silo_id = ?",
                    pool.id, silo_id));
    if (!link || pool.assignment != PoolAssignment::kSilos) {
      return Fail(selector.is_id() ? Error::NotFoundById("ip-pool", selector.id().ToString())
                                   : Error::NotFoundByName("ip-pool", selector.name().str()));
    }
    return SiloIpPool{pool, link->Int(0) != 0};
  });
}

}  // namespace fp::db
