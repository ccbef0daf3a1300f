#include "db/tokens.h"

#include "common/sha256.h"

namespace fp::db {

Result<Token> TokenCreate(Datastore& ds, const Uuid& id, const Uuid& silo_id, Role role,
                          const std::string& name, const std::string& secret,
                          const Effect<model::Token>& effect) {
  return ds.Write<Token>(effect, [&](Tx& tx) -> Result<Token> {
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

Status TokenRevoke(Datastore& ds, const Uuid& id, const Effect<void>& effect) {
  return ds.Write(effect, [&](Tx& tx) -> Status {
    int64_t changed = FP_TRY(tx.Exec(
        "UPDATE token SET time_revoked = ? WHERE id = ? AND time_revoked IS NULL", tx.now(), id));
    if (changed == 0) return Fail(Error::NotFoundById("token", id.ToString()));
    ds.SyncPoint("token_revoke:updated");
    return Ok();
  });
}

namespace {

Result<model::TokenListing> ListingFromRow(const Row& row) {
  auto role = ParseRole(row.Text(2));
  if (!role) return Fail(Error::Internal("corrupt token role"));
  return model::TokenListing{
      Token{FP_TRY(UuidColumn(row, 0)), FP_TRY(UuidColumn(row, 1)), *role, row.Text(3)},
      row.Int(4)};
}

}  // namespace

Result<std::vector<model::TokenListing>> TokenList(Datastore& ds, const std::optional<Uuid>& after,
                                                   int64_t limit) {
  return ds.Read<std::vector<model::TokenListing>>(
      [&](Tx& tx) -> Result<std::vector<model::TokenListing>> {
        std::vector<model::TokenListing> out;
        constexpr std::string_view kLive =
            "SELECT t.id, t.silo_id, t.role, t.name, t.time_created FROM token t JOIN silo s ON "
            "s.id = t.silo_id WHERE t.time_revoked IS NULL AND s.time_deleted IS NULL ";
        auto rows = after
                        ? FP_TRY(tx.Query(std::string(kLive) + "AND t.id > ? ORDER BY t.id LIMIT ?",
                                          *after, limit))
                        : FP_TRY(tx.Query(std::string(kLive) + "ORDER BY t.id LIMIT ?", limit));
        for (const Row& row : rows) out.push_back(FP_TRY(ListingFromRow(row)));
        return out;
      });
}

Result<model::TokenListing> TokenGet(Datastore& ds, const Uuid& id) {
  return ds.Read<model::TokenListing>([&](Tx& tx) -> Result<model::TokenListing> {
    auto row = FP_TRY(
        tx.QueryRow("SELECT id, silo_id, role, name, time_created FROM token WHERE id = ?", id));
    if (!row) return Fail(Error::NotFoundById("token", id.ToString()));
    return ListingFromRow(*row);
  });
}

}  // namespace fp::db
