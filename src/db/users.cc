#include "db/users.h"

#include "common/sha256.h"

namespace fp::db {

namespace {

constexpr const char* kUserColumns =
    "u.id, u.silo_id, u.external_id, u.role, u.password_hash IS NOT NULL, u.time_created, "
    "u.time_modified";

// A user from the kUserColumns of `row`, starting at column `first`.
Result<SiloUser> UserFromRow(const Row& row, size_t first = 0) {
  auto role = model::ParseRole(row.Text(first + 3));
  if (!role) return Fail(Error::Internal("corrupt silo_user role: " + row.Text(first + 3)));
  return SiloUser{.id = FP_TRY(UuidColumn(row, first)),
                  .silo_id = FP_TRY(UuidColumn(row, first + 1)),
                  .name = row.Text(first + 2),
                  .role = *role,
                  .can_log_in = row.Int(first + 4) != 0,
                  .time_created = row.Int(first + 5),
                  .time_modified = row.Int(first + 6)};
}

Status RequireLiveUser(Tx& tx, const Uuid& silo_id, const Uuid& id) {
  auto found = FP_TRY(
      tx.QueryRow("SELECT 1 FROM silo_user WHERE id = ? AND silo_id = ? AND time_deleted IS NULL",
                  id, silo_id));
  if (!found) return Fail(Error::NotFoundById("user", id.ToString()));
  return Ok();
}

}  // namespace

Result<SiloUser> UserCreate(Datastore& ds, const Uuid& id, const Uuid& silo_id,
                            const std::string& name, model::Role role,
                            const std::optional<std::string>& password_hash,
                            const Effect<SiloUser>& effect) {
  return ds.Write<SiloUser>(effect, [&](Tx& tx) -> Result<SiloUser> {
    auto silo =
        FP_TRY(tx.QueryRow("SELECT 1 FROM silo WHERE id = ? AND time_deleted IS NULL", silo_id));
    if (!silo) return Fail(Error::NotFoundById("silo", silo_id.ToString()));
    auto dup = FP_TRY(tx.QueryRow(
        "SELECT 1 FROM silo_user WHERE silo_id = ? AND external_id = ? AND time_deleted IS NULL",
        silo_id, name));
    if (dup) return Fail(Error::AlreadyExists("user", name));
    const Timestamp now = tx.now();
    FP_TRY(tx.Exec(
        "INSERT INTO silo_user (id, silo_id, external_id, role, password_hash, time_created, "
        "time_modified) VALUES (?, ?, ?, ?, ?, ?, ?)",
        id, silo_id, name, model::ToString(role), password_hash, now, now));
    return SiloUser{.id = id,
                    .silo_id = silo_id,
                    .name = name,
                    .role = role,
                    .can_log_in = password_hash.has_value(),
                    .time_created = now,
                    .time_modified = now};
  });
}

Status UserSetPassword(Datastore& ds, const Uuid& silo_id, const Uuid& id,
                       const std::optional<std::string>& password_hash,
                       const Effect<void>& effect) {
  return ds.Write(effect, [&](Tx& tx) -> Status {
    FP_CHECK_OK(RequireLiveUser(tx, silo_id, id));
    FP_TRY(tx.Exec("UPDATE silo_user SET password_hash = ?, time_modified = ? WHERE id = ?",
                   password_hash, tx.now(), id));
    // Whoever knew the old password is signed out everywhere.
    FP_TRY(tx.Exec("DELETE FROM console_session WHERE silo_user_id = ?", id));
    return Ok();
  });
}

Status UserDelete(Datastore& ds, const Uuid& silo_id, const Uuid& id, const Effect<void>& effect) {
  return ds.Write(effect, [&](Tx& tx) -> Status {
    FP_CHECK_OK(RequireLiveUser(tx, silo_id, id));
    FP_TRY(tx.Exec("UPDATE silo_user SET time_deleted = ?, password_hash = NULL WHERE id = ?",
                   tx.now(), id));
    FP_TRY(tx.Exec("DELETE FROM console_session WHERE silo_user_id = ?", id));
    return Ok();
  });
}

Result<SiloUser> UserGet(Datastore& ds, const std::optional<Uuid>& silo_id, const Uuid& id) {
  return ds.Read<SiloUser>([&](Tx& tx) -> Result<SiloUser> {
    const std::string live = std::string("SELECT ") + kUserColumns +
                             " FROM silo_user u WHERE u.id = ? AND u.time_deleted IS NULL";
    auto row = silo_id ? FP_TRY(tx.QueryRow(live + " AND u.silo_id = ?", id, *silo_id))
                       : FP_TRY(tx.QueryRow(live, id));
    if (!row) return Fail(Error::NotFoundById("user", id.ToString()));
    return UserFromRow(*row);
  });
}

Result<std::vector<SiloUser>> UserList(Datastore& ds, const Uuid& silo_id,
                                       const std::optional<Uuid>& after, int64_t limit) {
  return ds.Read<std::vector<SiloUser>>([&](Tx& tx) -> Result<std::vector<SiloUser>> {
    const std::string live = std::string("SELECT ") + kUserColumns +
                             " FROM silo_user u WHERE u.silo_id = ? AND u.time_deleted IS NULL";
    auto rows =
        after
            ? FP_TRY(tx.Query(live + " AND u.id > ? ORDER BY u.id LIMIT ?", silo_id, *after, limit))
            : FP_TRY(tx.Query(live + " ORDER BY u.id LIMIT ?", silo_id, limit));
    std::vector<SiloUser> users;
    for (const Row& row : rows) users.push_back(FP_TRY(UserFromRow(row)));
    return users;
  });
}

Result<std::optional<LoginCandidate>> UserForLogin(Datastore& ds, const Uuid& silo_id,
                                                   const std::string& name) {
  return ds.Read<std::optional<LoginCandidate>>(
      [&](Tx& tx) -> Result<std::optional<LoginCandidate>> {
        auto row = FP_TRY(tx.QueryRow(
            std::string("SELECT ") + kUserColumns +
                ", u.password_hash FROM silo_user u JOIN silo s ON s.id = u.silo_id WHERE "
                "u.silo_id = ? AND u.external_id = ? AND u.time_deleted IS NULL AND "
                "s.time_deleted IS NULL",
            silo_id, name));
        if (!row) return std::optional<LoginCandidate>();
        return std::optional<LoginCandidate>(
            LoginCandidate{FP_TRY(UserFromRow(*row)), row->OptText(7)});
      });
}

Status SessionCreate(Datastore& ds, const Uuid& id, const std::string& token,
                     const std::optional<Uuid>& user_id, const std::optional<Uuid>& api_token_id,
                     const Effect<void>& effect) {
  return ds.Write(effect, [&](Tx& tx) -> Status {
    const Timestamp now = tx.now();
    FP_TRY(tx.Exec(
        "INSERT INTO console_session (token_sha256, id, silo_user_id, token_id, time_created, "
        "time_last_used) VALUES (?, ?, ?, ?, ?, ?)",
        Sha256Hex(token), id, user_id, api_token_id, now, now));
    return Ok();
  });
}

Result<std::optional<Session>> SessionLookup(Datastore& ds, const std::string& token) {
  return ds.Read<std::optional<Session>>([&](Tx& tx) -> Result<std::optional<Session>> {
    auto found = FP_TRY(tx.QueryRow(
        "SELECT id, time_created, time_last_used, silo_user_id, token_id FROM console_session "
        "WHERE token_sha256 = ?",
        Sha256Hex(token)));
    if (!found) return std::optional<Session>();
    Session session{.id = FP_TRY(UuidColumn(*found, 0)),
                    .time_created = found->Int(1),
                    .time_last_used = found->Int(2)};
    if (auto user_id = FP_TRY(OptUuidColumn(*found, 3))) {
      auto row = FP_TRY(
          tx.QueryRow(std::string("SELECT ") + kUserColumns +
                          " FROM silo_user u JOIN silo s ON s.id = u.silo_id WHERE u.id = ? AND "
                          "u.time_deleted IS NULL AND s.time_deleted IS NULL",
                      *user_id));
      if (!row) return std::optional<Session>();
      session.user = FP_TRY(UserFromRow(*row));
    } else if (auto token_id = FP_TRY(OptUuidColumn(*found, 4))) {
      auto row = FP_TRY(tx.QueryRow(
          "SELECT t.role, t.name, t.silo_id FROM token t JOIN silo s ON s.id = t.silo_id WHERE "
          "t.id = ? AND t.time_revoked IS NULL AND s.time_deleted IS NULL",
          *token_id));
      if (!row) return std::optional<Session>();
      auto role = model::ParseRole(row->Text(0));
      if (!role) return Fail(Error::Internal("corrupt token role: " + row->Text(0)));
      session.api_token = model::Token{*token_id, FP_TRY(UuidColumn(*row, 2)), *role, row->Text(1)};
    } else {
      return std::optional<Session>();
    }
    return std::optional<Session>(std::move(session));
  });
}

Status SessionTouch(Datastore& ds, const Uuid& id) {
  return ds.Write([&](Tx& tx) -> Status {
    FP_TRY(tx.Exec("UPDATE console_session SET time_last_used = ? WHERE id = ?", tx.now(), id));
    return Ok();
  });
}

Status SessionDelete(Datastore& ds, const Uuid& id, const Effect<void>& effect) {
  return ds.Write(effect, [&](Tx& tx) -> Status {
    FP_TRY(tx.Exec("DELETE FROM console_session WHERE id = ?", id));
    return Ok();
  });
}

}  // namespace fp::db
