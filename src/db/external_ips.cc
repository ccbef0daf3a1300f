#include "db/external_ips.h"

#include <fmt/format.h>

#include "db/attach.h"
#include "db/instances.h"
#include "db/ip_allocation.h"
#include "db/ip_pools.h"
#include "db/quotas.h"

namespace fp::db {

Result<IpKind> IpKindColumn(const Row& r, size_t i) {
  auto kind = ParseIpKind(r.Text(i));
  if (!kind) {
    return Fail(Error::Internal(fmt::format("corrupt external IP kind \"{}\"", r.Text(i))));
  }
  return *kind;
}

Result<AttachState> AttachStateColumn(const Row& r, size_t i) {
  auto state = ParseAttachState(r.Text(i));
  if (!state) {
    return Fail(Error::Internal(fmt::format("corrupt external IP state \"{}\"", r.Text(i))));
  }
  return *state;
}

Result<ExternalIp> ExternalIpFromRow(const Row& r) {
  ExternalIp e;
  e.id = FP_TRY(UuidColumn(r, 0));
  e.name = r.OptText(1);
  e.description = r.OptText(2);
  e.pool_id = FP_TRY(UuidColumn(r, 3));
  e.range_id = FP_TRY(UuidColumn(r, 4));
  e.parent_id = FP_TRY(OptUuidColumn(r, 5));
  e.kind = FP_TRY(IpKindColumn(r, 6));
  e.ip = FP_TRY(IpColumn(r, 7));
  e.first_port = static_cast<int>(r.Int(8));
  e.last_port = static_cast<int>(r.Int(9));
  e.project_id = FP_TRY(OptUuidColumn(r, 10));
  e.state = FP_TRY(AttachStateColumn(r, 11));
  e.time_created = r.Int(12);
  e.time_modified = r.Int(13);
  return e;
}

namespace {

Result<ExternalIp> FloatingIpById(Tx& tx, const Uuid& id) {
  auto row = FP_TRY(tx.QueryRow(
      fmt::format("SELECT {} FROM external_ip e WHERE e.id = ? AND e.kind = 'floating' AND "
                  "e.time_deleted IS NULL",
                  kExternalIpColumns),
      id));
  if (!row) return Fail(Error::NotFoundById("floating-ip", id.ToString()));
  return ExternalIpFromRow(*row);
}

Error PoolNotFound(const NameOrId& selector) {
  return selector.is_id() ? Error::NotFoundById("ip-pool", selector.id().ToString())
                          : Error::NotFoundByName("ip-pool", selector.name().str());
}

Result<bool> IsLinked(Tx& tx, const Uuid& pool_id, const Uuid& silo_id) {
  auto link = FP_TRY(tx.QueryRow(
      "SELECT 1 FROM ip_pool_silo_link WHERE ip_pool_id = ? AND silo_id = ?", pool_id, silo_id));
  return link.has_value();
}

// The silo's default unicast pool (of `version`, if given), with the API's errors.
Result<Uuid> DefaultPool(Tx& tx, const Uuid& silo_id, std::optional<IpVersion> version) {
  std::vector<SqlValue> params{silo_id.ToString()};
  std::string sql =
      "SELECT l.ip_pool_id, l.ip_version FROM ip_pool_silo_link l JOIN ip_pool p ON "
      "p.id = l.ip_pool_id WHERE l.silo_id = ? AND l.is_default = 1 AND l.pool_type = 'unicast' "
      "AND p.time_deleted IS NULL AND p.assignment = 'silos'";
  if (version) {
    sql += " AND l.ip_version = ?";
    params.emplace_back(std::string(ToString(*version)));
  }
  auto rows = FP_TRY(tx.QueryV(sql + " ORDER BY l.ip_version", params));
  if (rows.empty()) {
    return Fail(Error::NotFound(
        version ? fmt::format("default unicast {} pool for current silo", Label(*version))
                : std::string("default unicast IP pool for current silo")));
  }
  if (rows.size() > 1) {
    return Fail(Error::InvalidRequest(
        "Multiple default unicast IP pools exist with different IP versions. Please specify "
        "ip_version (v4 or v6) or provide an explicit pool."));
  }
  return UuidColumn(rows.front(), 0);
}

}  // namespace

// Resolves the pool an allocation request draws from, as the caller's silo sees it. Runs in
// the allocating transaction, so a pool unlinked concurrently can never be drawn from.
Result<Uuid> ResolvePoolIdIn(Tx& tx, const Uuid& silo_id, const PoolSelector& selector) {
  if (selector.mode == PoolSelector::Mode::kDefault) {
    return DefaultPool(tx, silo_id, selector.ip_version);
  }
  const NameOrId& which = *selector.pool;
  auto pool = LookupPoolIn(tx, which);
  if (!pool) return Fail(PoolNotFound(which));
  if (pool->pool_type != PoolType::kUnicast) {
    return Fail(Error::InvalidRequest(
        fmt::format("Pool '{}' is not a unicast pool (type: multicast)", pool->name)));
  }
  if (pool->assignment != PoolAssignment::kSilos || !FP_TRY(IsLinked(tx, pool->id, silo_id))) {
    return Fail(PoolNotFound(which));
  }
  return pool->id;
}

namespace {

// The pool whose live range holds `ip`, if that pool is a unicast pool linked to the silo.
Result<Uuid> PoolOfAddress(Tx& tx, const Uuid& silo_id, const IpAddr& ip) {
  auto row = FP_TRY(tx.QueryRow(
      "SELECT r.ip_pool_id, r.last_address, p.pool_type, p.assignment FROM ip_pool_range r "
      "JOIN ip_pool p ON p.id = r.ip_pool_id WHERE r.time_deleted IS NULL AND "
      "p.time_deleted IS NULL AND r.first_address <= ? ORDER BY r.first_address DESC LIMIT 1",
      ip));
  auto not_in_pool = [&] {
    return Error::InvalidRequest(
        fmt::format("IP address {} is not in any configured pool", ip.ToString()));
  };
  if (!row) return Fail(not_in_pool());
  IpAddr last = FP_TRY(IpColumn(*row, 1));
  if (last.version() != ip.version() || last < ip) return Fail(not_in_pool());
  Uuid pool_id = FP_TRY(UuidColumn(*row, 0));
  if (row->Text(2) != "unicast" || row->Text(3) != "silos" ||
      !FP_TRY(IsLinked(tx, pool_id, silo_id))) {
    return Fail(not_in_pool());
  }
  return pool_id;
}

}  // namespace

Result<ExternalIp> ExternalIpGetIn(Tx& tx, const Uuid& id) {
  auto row = FP_TRY(tx.QueryRow(
      fmt::format("SELECT {} FROM external_ip e WHERE e.id = ?", kExternalIpColumns), id));
  if (!row) return Fail(Error::NotFoundById("external-ip", id.ToString()));
  return ExternalIpFromRow(*row);
}

Result<std::vector<ExternalIp>> InstanceExternalIpsIn(Tx& tx, const Uuid& instance_id) {
  std::vector<ExternalIp> out;
  for (const Row& r :
       FP_TRY(tx.Query(fmt::format("SELECT {} FROM external_ip e WHERE e.parent_id = ? AND "
                                   "e.time_deleted IS NULL ORDER BY e.kind DESC, e.ip",
                                   kExternalIpColumns),
                       instance_id))) {
    out.push_back(FP_TRY(ExternalIpFromRow(r)));
  }
  return out;
}

Result<ExternalIp> FloatingIpCreateIn(Tx& tx, const model::FloatingIpCreate& p,
                                      const std::function<void(std::string_view)>& sync_point) {
  {
    auto project = FP_TRY(
        tx.QueryRow("SELECT 1 FROM project WHERE id = ? AND silo_id = ? AND time_deleted IS NULL",
                    p.project_id, p.silo_id));
    if (!project) return Fail(Error::NotFoundById("project", p.project_id.ToString()));
    auto dup = FP_TRY(tx.QueryRow(
        "SELECT 1 FROM external_ip WHERE project_id = ? AND name = ? AND kind = 'floating' AND "
        "time_deleted IS NULL",
        p.project_id, p.name));
    if (dup) return Fail(Error::AlreadyExists("floating-ip", p.name));

    Uuid pool_id;
    AllocatedAddress a;
    if (p.address.explicit_ip) {
      pool_id = FP_TRY(PoolOfAddress(tx, p.silo_id, *p.address.explicit_ip));
      a = FP_TRY(AllocateExplicitAddress(tx, pool_id, *p.address.explicit_ip));
    } else {
      pool_id = FP_TRY(ResolvePoolIdIn(tx, p.silo_id, p.address.selector));
      auto lowest = AllocateLowestAddress(tx, pool_id);
      if (!lowest) {
        return Fail(
            NoneFreeIn(tx, lowest.error(), pool_id, fmt::format("for floating IP \"{}\"", p.name)));
      }
      a = *lowest;
    }
    FP_TRY(CheckProjectIpQuotaIn(tx, p.project_id,
                                 IpCharge{a.ip.version(), model::kQuartersPerAddress,
                                          fmt::format("the floating IP \"{}\"", p.name)}));
    if (sync_point) sync_point("floating_ip_create:allocated");
    FP_TRY(
        tx.Exec("INSERT INTO external_ip (id, name, description, ip_pool_id, ip_pool_range_id, "
                "parent_id, kind, ip, first_port, last_port, project_id, state, time_created, "
                "time_modified, quota_project_id, quota_silo_id) VALUES (?, ?, ?, ?, ?, NULL, "
                "'floating', ?, ?, ?, ?, 'detached', ?, ?, ?, ?)",
                p.id, p.name, p.description, pool_id, a.range_id, a.ip, a.first_port, a.last_port,
                p.project_id, tx.now(), tx.now(), p.project_id, p.silo_id));
    ExternalIp e;
    e.id = p.id;
    e.name = p.name;
    e.description = p.description;
    e.pool_id = pool_id;
    e.range_id = a.range_id;
    e.kind = IpKind::kFloating;
    e.ip = a.ip;
    e.first_port = a.first_port;
    e.last_port = a.last_port;
    e.project_id = p.project_id;
    e.time_created = e.time_modified = tx.now();
    return e;
  }
}

Result<ExternalIp> FloatingIpCreate(Datastore& ds, const model::FloatingIpCreate& p,
                                    const Effect<model::ExternalIp>& effect) {
  return ds.Write<ExternalIp>(effect, [&](Tx& tx) {
    return FloatingIpCreateIn(tx, p, [&ds](std::string_view name) { ds.SyncPoint(name); });
  });
}

namespace {

// `last`: the transaction's last statement (Tx::QueryLast: one round trip on PostgreSQL).
Result<ExternalIp> FloatingIpLookupByIdIn(Tx& tx, const Uuid& silo_id, const Uuid& id, bool last) {
  static const std::string kSql = fmt::format(
      "SELECT {} FROM external_ip e JOIN project pr ON pr.id = e.project_id "
      "WHERE e.id = ? AND e.kind = 'floating' AND e.time_deleted IS NULL AND "
      "pr.silo_id = ? AND pr.time_deleted IS NULL",
      kExternalIpColumns);
  auto row = FP_TRY(last ? tx.QueryRowLast(kSql, id, silo_id) : tx.QueryRow(kSql, id, silo_id));
  if (!row) return Fail(Error::NotFoundById("floating-ip", id.ToString()));
  return ExternalIpFromRow(*row);
}

}  // namespace

Result<ExternalIp> FloatingIpLookupByIdIn(Tx& tx, const Uuid& silo_id, const Uuid& id) {
  return FloatingIpLookupByIdIn(tx, silo_id, id, false);
}

Result<ExternalIp> FloatingIpLookupById(Reader ds, const Uuid& silo_id, const Uuid& id) {
  return ds.Read<ExternalIp>(
      [&](Tx& tx) -> Result<ExternalIp> { return FloatingIpLookupByIdIn(tx, silo_id, id, true); });
}

Result<ExternalIp> FloatingIpLookupByName(Reader ds, const Uuid& project_id,
                                          const std::string& name) {
  static const std::string kSql = fmt::format(
      "SELECT {} FROM external_ip e WHERE e.project_id = ? AND e.name = ? AND "
      "e.kind = 'floating' AND e.time_deleted IS NULL",
      kExternalIpColumns);
  return ds.Read<ExternalIp>([&](Tx& tx) -> Result<ExternalIp> {
    auto row = FP_TRY(tx.QueryRowLast(kSql, project_id, name));
    if (!row) return Fail(Error::NotFoundByName("floating-ip", name));
    return ExternalIpFromRow(*row);
  });
}

Result<std::vector<ExternalIp>> FloatingIpList(Datastore& ds, const Uuid& project_id,
                                               const PageRequest& page) {
  return ds.Read<std::vector<ExternalIp>>([&](Tx& tx) -> Result<std::vector<ExternalIp>> {
    std::vector<SqlValue> params{project_id.ToString()};
    std::string sql = fmt::format(
        "SELECT {} FROM external_ip e WHERE e.project_id = ? AND e.kind = 'floating' AND "
        "e.time_deleted IS NULL",
        kExternalIpColumns);
    sql += PageClause(page, "e.name", "e.id", params);
    std::vector<ExternalIp> out;
    for (const Row& r : FP_TRY(tx.QueryV(sql, params))) {
      out.push_back(FP_TRY(ExternalIpFromRow(r)));
    }
    return out;
  });
}

Result<ExternalIp> FloatingIpUpdate(Datastore& ds, const Uuid& id, const IdentityUpdate& update,
                                    const Effect<model::ExternalIp>& effect) {
  return ds.Write<ExternalIp>(effect, [&](Tx& tx) -> Result<ExternalIp> {
    ExternalIp e = FP_TRY(FloatingIpById(tx, id));
    if (update.name && *update.name != *e.name) {
      auto dup = FP_TRY(tx.QueryRow(
          "SELECT 1 FROM external_ip WHERE project_id = ? AND name = ? AND kind = 'floating' AND "
          "time_deleted IS NULL",
          e.project_id, *update.name));
      if (dup) return Fail(Error::AlreadyExists("floating-ip", *update.name));
      e.name = *update.name;
    }
    if (update.description) e.description = *update.description;
    e.time_modified = tx.now();
    FP_TRY(
        tx.Exec("UPDATE external_ip SET name = ?, description = ?, time_modified = ? WHERE id = ?",
                e.name, e.description, e.time_modified, id));
    return e;
  });
}

Result<ExternalIp> FloatingIpTransfer(Datastore& ds, const Uuid& id, const Uuid& to_project,
                                      const Effect<model::ExternalIp>& effect) {
  return ds.Write<ExternalIp>(effect, [&](Tx& tx) -> Result<ExternalIp> {
    ExternalIp e = FP_TRY(FloatingIpById(tx, id));
    if (e.project_id == to_project) return e;
    if (e.state != AttachState::kDetached || e.parent_id) {
      std::string holder = "an instance";
      if (e.parent_id) {
        auto row = FP_TRY(tx.QueryRow("SELECT name FROM instance WHERE id = ?", *e.parent_id));
        if (row) holder = fmt::format("instance \"{}\"", row->Text(0));
      }
      if (e.state == AttachState::kAttached) {
        return Fail(Error::InvalidRequest(fmt::format(
            "floating IP \"{}\" cannot change project while it is attached to {}; detach it "
            "first",
            e.name.value_or(""), holder)));
      }
      // In flux: it will be attached or detached soon; a retry then has its answer.
      return Fail(Error::Unavailable(fmt::format(
          "floating IP \"{}\" is being {} {}; retry the transfer when that operation completes",
          e.name.value_or(""), e.state == AttachState::kAttaching ? "attached to" : "detached from",
          holder)));
    }
    // The target is live (a project deleted since the caller looked it up takes nothing), and
    // of the IP's silo (the caller looked it up in the actor's; this holds it here too).
    auto project = FP_TRY(tx.QueryRow(
        "SELECT t.name FROM project t JOIN project s ON s.silo_id = t.silo_id WHERE t.id = ? AND "
        "t.time_deleted IS NULL AND s.id = ?",
        to_project, e.project_id));
    if (!project) return Fail(Error::NotFoundById("project", to_project.ToString()));
    auto dup = FP_TRY(tx.QueryRow(
        "SELECT 1 FROM external_ip WHERE project_id = ? AND name = ? AND kind = 'floating' AND "
        "time_deleted IS NULL",
        to_project, e.name));
    if (dup) {
      return Fail(Error(ErrorKind::kObjectAlreadyExists,
                        fmt::format("already exists: floating-ip \"{}\" in project \"{}\"; "
                                    "rename one of them first",
                                    e.name.value_or(""), project->Text(0))));
    }
    // The address stays in the silo: only the target project's quota can refuse it.
    FP_TRY(
        CheckProjectIpQuotaIn(tx, to_project,
                              IpCharge{e.ip.version(), model::kQuartersPerAddress,
                                       fmt::format("the floating IP \"{}\"", e.name.value_or("")),
                                       /*silo=*/false}));
    e.project_id = to_project;
    e.time_modified = tx.now();
    FP_TRY(tx.Exec(
        "UPDATE external_ip SET project_id = ?, quota_project_id = ?, time_modified = ? WHERE "
        "id = ?",
        to_project, to_project, e.time_modified, id));
    return e;
  });
}

namespace {

// Why a floating IP attached (or mid-operation) to instance `holder` cannot be deleted.
Error AttachedFloatingIp(const std::string& name, AttachState state, const std::string& holder) {
  return Error::InvalidRequest(fmt::format(
      "Floating IP cannot be deleted while attached to an instance (floating IP \"{}\" is {} "
      "instance \"{}\"; detach it first)",
      name,
      state == AttachState::kAttached    ? "attached to"
      : state == AttachState::kAttaching ? "being attached to"
                                         : "being detached from",
      holder));
}

// FloatingIpDeleteIn on PostgreSQL: the check and the change are one statement, the function
// fp_floating_ip_delete of migration 8 (schema_postgres.cc), so that the delete costs one
// round trip to the server instead of one per statement.
Status FloatingIpDeletePostgres(Tx& tx, const Uuid& id) {
  auto row = FP_TRY(tx.QueryRow("SELECT * FROM fp_floating_ip_delete(?, ?)", id, tx.now()));
  if (!row) return Fail(Error::Internal("floating IP delete returned no row"));
  const std::string& outcome = row->Text(0);
  if (outcome == "ok") return Ok();
  if (outcome == "not_found") return Fail(Error::NotFoundById("floating-ip", id.ToString()));
  if (outcome == "attached") {
    AttachState state = FP_TRY(AttachStateColumn(*row, 2));
    return Fail(AttachedFloatingIp(row->Text(1), state, row->Text(3)));
  }
  return Fail(Error::Internal(fmt::format("floating IP delete returned '{}'", outcome)));
}

}  // namespace

Status FloatingIpDeleteIn(Tx& tx, const Uuid& id,
                          const std::function<void(std::string_view)>& sync_point) {
  if (tx.postgres()) {
    // One statement, one round trip to the server (see FloatingIpDeletePostgres). The sync
    // point comes after it, still inside the transaction: check and change are done, as on
    // SQLite, and not yet committed.
    FP_CHECK_OK(FloatingIpDeletePostgres(tx, id));
    if (sync_point) sync_point("floating_ip_delete:checked");
    return Ok();
  }
  ExternalIp e = FP_TRY(FloatingIpById(tx, id));
  if (e.parent_id || e.state != AttachState::kDetached) {
    std::string holder = e.parent_id ? e.parent_id->ToString() : std::string("?");
    if (e.parent_id) {
      auto row = FP_TRY(tx.QueryRow("SELECT name FROM instance WHERE id = ?", *e.parent_id));
      if (row) holder = row->Text(0);
    }
    return Fail(AttachedFloatingIp(*e.name, e.state, holder));
  }
  if (sync_point) sync_point("floating_ip_delete:checked");
  FP_TRY(tx.Exec("UPDATE external_ip SET time_deleted = ? WHERE id = ?", tx.now(), id));
  FP_CHECK_OK(
      ReleaseAddress(tx, e.pool_id, AllocatedAddress{e.range_id, e.ip, e.first_port, e.last_port}));
  return Ok();
}

Status FloatingIpDelete(Datastore& ds, const Uuid& id, const Effect<void>& effect) {
  return ds.Write(effect, [&](Tx& tx) -> Status {
    return FloatingIpDeleteIn(tx, id, [&ds](std::string_view name) { ds.SyncPoint(name); });
  });
}

Result<ExternalIp> FloatingIpByName(Datastore& ds, const Uuid& project_id, const NameOrId& fip) {
  if (fip.is_id()) {
    return ds.Read<ExternalIp>([&](Tx& tx) -> Result<ExternalIp> {
      auto ip = ExternalIpGetIn(tx, fip.id());
      if (!ip || ip->kind != IpKind::kFloating) {
        return Fail(Error::NotFoundById("floating-ip", fip.id().ToString()));
      }
      return *ip;
    });
  }
  return FloatingIpLookupByName(ds, project_id, fip.name().str());
}

Result<std::vector<ExternalIp>> InstanceExternalIps(Reader ds, const Uuid& instance_id) {
  return ds.Read<std::vector<ExternalIp>>(
      [&](Tx& tx) { return InstanceExternalIpsIn(tx, instance_id); });
}

Result<std::map<Uuid, std::vector<ExternalIp>>> ExternalIpsOnSled(Datastore& ds,
                                                                  const Uuid& sled_id) {
  using Out = std::map<Uuid, std::vector<ExternalIp>>;
  return ds.Read<Out>([&](Tx& tx) -> Result<Out> {
    Out out;
    for (const Row& r : FP_TRY(tx.Query(
             fmt::format("SELECT {} FROM external_ip e JOIN instance i ON i.id = e.parent_id "
                         "WHERE i.sled_id = ? AND i.time_deleted IS NULL AND "
                         "e.time_deleted IS NULL ORDER BY e.kind DESC, e.ip",
                         kExternalIpColumns),
             sled_id))) {
      ExternalIp e = FP_TRY(ExternalIpFromRow(r));
      if (e.parent_id) out[*e.parent_id].push_back(std::move(e));
    }
    return out;
  });
}

Status ExternalIpReleaseIn(Tx& tx, const Uuid& id) {
  auto row = FP_TRY(
      tx.QueryRow("SELECT ip_pool_id, ip_pool_range_id, ip, first_port, last_port FROM external_ip "
                  "WHERE id = ? AND time_deleted IS NULL",
                  id));
  if (!row) return Ok();
  // SNAT rows keep their parent even when released (the schema requires one).
  FP_TRY(
      tx.Exec("UPDATE external_ip SET time_deleted = ?, state = 'detached', parent_id = "
              "CASE WHEN kind = 'snat' THEN parent_id ELSE NULL END WHERE id = ?",
              tx.now(), id));
  return ReleaseAddress(
      tx, FP_TRY(UuidColumn(*row, 0)),
      AllocatedAddress{FP_TRY(UuidColumn(*row, 1)), FP_TRY(IpColumn(*row, 2)),
                       static_cast<int>(row->Int(3)), static_cast<int>(row->Int(4))});
}

}  // namespace fp::db
