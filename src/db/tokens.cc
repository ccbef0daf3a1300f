#include <fmt/format.h>

#include "db/datastore.h"

namespace fp::db {

Result<Token> Datastore::TokenCreate(const Uuid& id, const Uuid& silo_id, Role role,
                                     const std::string& name, const std::string& secret) {
  return Write<Token>([&](Tx& tx) -> Result<Token> {
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

namespace {
constexpr size_t kTokenCacheMax = 10000;  // past this many tokens in use, start over
}  // namespace

Result<std::optional<Token>> Datastore::TokenAuthenticate(const std::string& secret) {
  std::string hash = HashToken(secret);
  const auto now = std::chrono::steady_clock::now();
  uint64_t generation = 0;
  {
    std::lock_guard lock(token_cache_mu_);
    if (auto it = token_cache_.find(hash); it != token_cache_.end()) {
      if (it->second.expires > now) return std::optional<Token>(it->second.token);
      token_cache_.erase(it);
    }
    generation = token_generation_;
  }
  auto found = FP_TRY(Read<std::optional<Token>>([&](Tx& tx) -> Result<std::optional<Token>> {
    auto row = FP_TRY(tx.QueryRow(
        "SELECT t.id, t.silo_id, t.role, t.name FROM token t JOIN silo s ON s.id = t.silo_id "
        "WHERE t.secret_sha256 = ? AND t.time_revoked IS NULL AND s.time_deleted IS NULL",
        hash));
    if (!row) return std::optional<Token>();
    auto role = ParseRole(row->Text(2));
    if (!role) return Fail(Error::Internal("corrupt token role"));
    return std::optional<Token>(
        Token{FP_TRY(UuidColumn(*row, 0)), FP_TRY(UuidColumn(*row, 1)), *role, row->Text(3)});
  }));
  SyncPoint("token_authenticate:read");
  if (found) {
    std::lock_guard lock(token_cache_mu_);
    if (token_generation_ == generation) {
      if (token_cache_.size() >= kTokenCacheMax) token_cache_.clear();
      token_cache_.insert_or_assign(std::move(hash), CachedToken{*found, now + kTokenCacheTtl});
    }
  }
  return found;
}

void Datastore::InvalidateTokenCache() {
  std::lock_guard lock(token_cache_mu_);
  ++token_generation_;
  token_cache_.clear();
}

Status Datastore::TokenRevoke(const Uuid& id) {
  Status revoked = RunTransaction(true, [&](Tx& tx) -> Status {
    int64_t changed = FP_TRY(tx.Exec(
        "UPDATE token SET time_revoked = ? WHERE id = ? AND time_revoked IS NULL", tx.now(), id));
    if (changed == 0) return Fail(Error::NotFoundById("token", id.ToString()));
    SyncPoint("token_revoke:updated");
    return Ok();
  });
  InvalidateTokenCache();  // after the commit: see TokenAuthenticate
  return revoked;
}

}  // namespace fp::db
