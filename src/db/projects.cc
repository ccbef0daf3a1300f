#include "db/projects.h"

#include <fmt/format.h>

namespace fp::db {

namespace {

constexpr std::string_view kProjectColumns =
    "id, silo_id, name, description, time_created, time_modified";

Result<Project> ProjectFromRow(const Row& r) {
  Project p;
  p.id = FP_TRY(UuidColumn(r, 0));
  p.silo_id = FP_TRY(UuidColumn(r, 1));
  p.name = r.Text(2);
  p.description = r.Text(3);
  p.time_created = r.Int(4);
  p.time_modified = r.Int(5);
  return p;
}

Result<Project> ProjectById(Tx& tx, const Uuid& id) {
  auto row = FP_TRY(tx.QueryRow(
      fmt::format("SELECT {} FROM project WHERE id = ? AND time_deleted IS NULL", kProjectColumns),
      id));
  if (!row) return Fail(Error::NotFoundById("project", id.ToString()));
  return ProjectFromRow(*row);
}

}  // namespace

Result<Project> ProjectCreate(Datastore& ds, const Uuid& id, const Uuid& silo_id,
                              const std::string& name, const std::string& description,
                              const Effect<model::Project>& effect) {
  return ds.Write<Project>(effect, [&](Tx& tx) -> Result<Project> {
    auto silo =
        FP_TRY(tx.QueryRow("SELECT 1 FROM silo WHERE id = ? AND time_deleted IS NULL", silo_id));
    if (!silo) return Fail(Error::NotFoundById("silo", silo_id.ToString()));
    auto dup = FP_TRY(
        tx.QueryRow("SELECT 1 FROM project WHERE silo_id = ? AND name = ? AND time_deleted IS NULL",
                    silo_id, name));
    if (dup) return Fail(Error::AlreadyExists("project", name));
    FP_TRY(
        tx.Exec("INSERT INTO project (id, silo_id, name, description, time_created, time_modified) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                id, silo_id, name, description, tx.now(), tx.now()));
    return Project{id, silo_id, name, description, tx.now(), tx.now()};
  });
}

Result<Project> ProjectLookup(Reader ds, const Uuid& silo_id, const NameOrId& selector) {
  return ds.Read<Project>([&](Tx& tx) -> Result<Project> {
    std::optional<Row> row;
    if (selector.is_id()) {
      row = FP_TRY(tx.QueryRow(
          fmt::format(
              "SELECT {} FROM project WHERE id = ? AND silo_id = ? AND time_deleted IS NULL",
              kProjectColumns),
          selector.id(), silo_id));
      if (!row) return Fail(Error::NotFoundById("project", selector.id().ToString()));
    } else {
      row = FP_TRY(tx.QueryRow(
          fmt::format(
              "SELECT {} FROM project WHERE name = ? AND silo_id = ? AND time_deleted IS NULL",
              kProjectColumns),
          selector.name().str(), silo_id));
      if (!row) return Fail(Error::NotFoundByName("project", selector.name().str()));
    }
    return ProjectFromRow(*row);
  });
}

Result<std::vector<Project>> ProjectList(Datastore& ds, const Uuid& silo_id,
                                         const PageRequest& page) {
  return ds.Read<std::vector<Project>>([&](Tx& tx) -> Result<std::vector<Project>> {
    std::vector<SqlValue> params{silo_id.ToString()};
    std::string sql =
        fmt::format("SELECT {} FROM project WHERE silo_id = ? AND time_deleted IS NULL",
                    kProjectColumns) +
        PageClause(page, "name", "id", params);
    std::vector<Project> out;
    for (const Row& r : FP_TRY(tx.QueryV(sql, params))) out.push_back(FP_TRY(ProjectFromRow(r)));
    return out;
  });
}

Result<Project> ProjectUpdate(Datastore& ds, const Uuid& id, const IdentityUpdate& update,
                              const Effect<model::Project>& effect) {
  return ds.Write<Project>(effect, [&](Tx& tx) -> Result<Project> {
    Project p = FP_TRY(ProjectById(tx, id));
    if (update.name && *update.name != p.name) {
      auto dup = FP_TRY(tx.QueryRow(
          "SELECT 1 FROM project WHERE silo_id = ? AND name = ? AND time_deleted IS NULL",
          p.silo_id, *update.name));
      if (dup) return Fail(Error::AlreadyExists("project", *update.name));
      p.name = *update.name;
    }
    if (update.description) p.description = *update.description;
    p.time_modified = tx.now();
    FP_TRY(tx.Exec("UPDATE project SET name = ?, description = ?, time_modified = ? WHERE id = ?",
                   p.name, p.description, p.time_modified, id));
    return p;
  });
}

Status ProjectDelete(Datastore& ds, const Uuid& id, const Effect<void>& effect) {
  return ds.Write(effect, [&](Tx& tx) -> Status {
    Project p = FP_TRY(ProjectById(tx, id));
    auto fip = FP_TRY(
        tx.QueryRow("SELECT name FROM external_ip WHERE project_id = ? AND kind = 'floating' AND "
                    "time_deleted IS NULL ORDER BY name LIMIT 1",
                    id));
    if (fip) {
      return Fail(Error::InvalidRequest(fmt::format(
          "project \"{}\" cannot be deleted while it contains floating IPs (floating IP \"{}\"); "
          "delete them first",
          p.name, fip->Text(0))));
    }
    FP_TRY(tx.Exec("UPDATE project SET time_deleted = ? WHERE id = ?", tx.now(), id));
    return Ok();
  });
}

}  // namespace fp::db
