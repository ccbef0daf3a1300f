#include "db/tokens.h"

#include "common/sha256.h"

namespace fp::db {

Result<Token> TokenCreate(Datastore& ds, const Uuid& id, const Uuid& silo_id, Role role,
                          const std::string& name, const std::string& secret) {
  return ds.Write<Token>([&](Tx& tx) -> Result<Token> {
    auto silo =
        FP_TRY(tx.QueryRow("SELECT 1 FROM silo WHERE id = ? AND time_deleted IS NULL", silo_id));
    if (!silo) return Fail(Error::NotFoundById("silo", silo_id.ToString()));
    FP_TRY(
        tx.Exec("INSERT INTO token (id, silo_id, role, name, secret_sha256, time_created) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                id, silo_id, ToString(role), name, Sha256Hex(secret), tx.now()));
    return Token{id, silo_id, role, name};
  });
}

Result<std::optional<Token>> TokenAuthenticate(Datastore& ds, const std::string& secret) {
  return ds.Read<std::optional<Token>>([&](Tx& tx) -> Result<std::optional<Token>> {
    auto row = FP_TRY(tx.QueryRow(
        "SELECT t.id, t.silo_id, t.role, t.name FROM token t JOIN silo s ON s.id = t.silo_id "
        "WHERE t.secret_sha256 = ? AND t.time_revoked IS NULL AND s.time_deleted IS NULL",
        Sha256Hex(secret)));
    if (!row) return std::optional<Token>();
    auto role = ParseRole(row->Text(2));
    if (!role) return Fail(Error::Internal("corrupt token role"));
    return std::optional<Token>(
        Token{FP_TRY(UuidColumn(*row, 0)), FP_TRY(UuidColumn(*row, 1)), *role, row->Text(3)});
  });
}

Status TokenRevoke(Datastore& ds, const Uuid& id) {
  return ds.Write([&](Tx& tx) -> Status {
    int64_t changed = FP_TRY(tx.Exec(
        "UPDATE token SET time_revoked = ? WHERE id = ? AND time_revoked IS NULL", tx.now(), id));
    if (changed == 0) return Fail(Error::NotFoundById("token", id.ToString()));
    ds.SyncPoint("token_revoke:updated");
    return Ok();
  });
}

}  // namespace fp::db
