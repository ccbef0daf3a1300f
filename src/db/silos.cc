#include "db/silos.h"

#include <fmt/format.h>

namespace fp::db {

namespace {

constexpr std::string_view kSiloColumns =
    "id, name, description, discoverable, identity_mode, admin_group_name, time_created, "
    "time_modified";

Result<Silo> SiloFromRow(const Row& r) {
  Silo s;
  s.id = FP_TRY(UuidColumn(r, 0));
  s.name = r.Text(1);
  s.description = r.Text(2);
  s.discoverable = r.Int(3) != 0;
  s.identity_mode = r.Text(4);
  s.admin_group_name = r.OptText(5);
  s.time_created = r.Int(6);
  s.time_modified = r.Int(7);
  return s;
}

}  // namespace

Result<Silo> LookupSiloIn(Tx& tx, const NameOrId& selector) {
  std::optional<Row> row;
  if (selector.is_id()) {
    row = FP_TRY(tx.QueryRow(
        fmt::format("SELECT {} FROM silo WHERE id = ? AND time_deleted IS NULL", kSiloColumns),
        selector.id()));
    if (!row) return Fail(Error::NotFoundById("silo", selector.id().ToString()));
  } else {
    row = FP_TRY(tx.QueryRow(
        fmt::format("SELECT {} FROM silo WHERE name = ? AND time_deleted IS NULL", kSiloColumns),
        selector.name().str()));
    if (!row) return Fail(Error::NotFoundByName("silo", selector.name().str()));
  }
  return SiloFromRow(*row);
}

Result<Silo> SiloCreate(Datastore& ds, const model::SiloCreate& p,
                        const Effect<model::Silo>& effect) {
  return ds.Write<Silo>(effect, [&](Tx& tx) -> Result<Silo> {
    auto dup =
        FP_TRY(tx.QueryRow("SELECT 1 FROM silo WHERE name = ? AND time_deleted IS NULL", p.name));
    if (dup) return Fail(Error::AlreadyExists("silo", p.name));
    FP_TRY(tx.Exec(
        "INSERT INTO silo (id, name, description, discoverable, identity_mode, admin_group_name, "
        "time_created, time_modified, cpus_quota, memory_quota, storage_quota) VALUES (?, ?, ?, "
        "?, ?, ?, ?, ?, ?, ?, ?)",
        p.id, p.name, p.description, p.discoverable, p.identity_mode, p.admin_group_name, tx.now(),
        tx.now(), p.cpus_quota, p.memory_quota, p.storage_quota));
    return Silo{p.id,           p.name,          p.description,
                p.discoverable, p.identity_mode, p.admin_group_name,
                tx.now(),       tx.now()};
  });
}

Result<Silo> SiloLookup(Datastore& ds, const NameOrId& selector) {
  return ds.Read<Silo>([&](Tx& tx) { return LookupSiloIn(tx, selector); });
}

Result<std::vector<Silo>> SiloList(Datastore& ds, const PageRequest& page) {
  return ds.Read<std::vector<Silo>>([&](Tx& tx) -> Result<std::vector<Silo>> {
    std::vector<SqlValue> params;
    std::string sql =
        fmt::format("SELECT {} FROM silo WHERE time_deleted IS NULL AND discoverable = 1",
                    kSiloColumns) +
        PageClause(page, "name", "id", params);
    std::vector<Silo> out;
    for (const Row& r : FP_TRY(tx.QueryV(sql, params))) out.push_back(FP_TRY(SiloFromRow(r)));
    return out;
  });
}

Status SiloDelete(Datastore& ds, const Uuid& id, const Effect<void>& effect) {
  return ds.Write(effect, [&](Tx& tx) -> Status {
    auto silo =
        FP_TRY(tx.QueryRow("SELECT name FROM silo WHERE id = ? AND time_deleted IS NULL", id));
    if (!silo) return Fail(Error::NotFoundById("silo", id.ToString()));
    auto project = FP_TRY(tx.QueryRow(
        "SELECT name FROM project WHERE silo_id = ? AND time_deleted IS NULL ORDER BY name LIMIT 1",
        id));
    if (project) {
      return Fail(Error::InvalidRequest(fmt::format(
          "silo \"{}\" cannot be deleted while it contains projects (project \"{}\"); delete them "
          "first",
          silo->Text(0), project->Text(0))));
    }
    FP_TRY(tx.Exec("DELETE FROM ip_pool_silo_link WHERE silo_id = ?", id));
    FP_TRY(tx.Exec("UPDATE token SET time_revoked = ? WHERE silo_id = ? AND time_revoked IS NULL",
                   tx.now(), id));
    FP_TRY(tx.Exec("UPDATE silo SET time_deleted = ? WHERE id = ?", tx.now(), id));
    return Ok();
  });
}

}  // namespace fp::db
