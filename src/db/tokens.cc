#include "db/tokens.h"

#include <fmt/format.h>
#include <openssl/evp.h>

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
                id, silo_id, ToString(role), name, HashToken(secret), tx.now()));
    return Token{id, silo_id, role, name};
  });
}

Result<std::optional<Token>> TokenAuthenticate(Datastore& ds, const std::string& secret) {
  return ds.Read<std::optional<Token>>([&](Tx& tx) -> Result<std::optional<Token>> {
    auto row = FP_TRY(tx.QueryRow(
        "SELECT t.id, t.silo_id, t.role, t.name FROM token t JOIN silo s ON s.id = t.silo_id "
        "WHERE t.secret_sha256 = ? AND t.time_revoked IS NULL AND s.time_deleted IS NULL",
        HashToken(secret)));
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

std::string HashToken(const std::string& secret) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(secret.data(), secret.size(), digest, &len, EVP_sha256(), nullptr);
  std::string hex;
  hex.reserve(len * 2);
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

}  // namespace fp::db
