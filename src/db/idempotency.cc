#include "db/idempotency.h"

#include "db/in_transaction.h"

namespace fp::db {

Result<IdempotencyClaim> IdempotencyBegin(Datastore& ds, const Uuid& token_id,
                                          const std::string& key, const std::string& request_sha256,
                                          int64_t abandon_after_us) {
  return ds.Write<IdempotencyClaim>([&](Tx& tx) -> Result<IdempotencyClaim> {
    auto row = FP_TRY(
        tx.QueryRow("SELECT request_sha256, state, status, body, time_created FROM idempotency_key "
                    "WHERE token_id = ? AND key = ?",
                    token_id, key));
    IdempotencyClaim claim;
    if (row) {
      if (row->Text(0) != request_sha256) {
        claim.kind = IdempotencyClaim::Kind::kMismatch;
        return claim;
      }
      if (row->Text(1) == "done") {
        claim.kind = IdempotencyClaim::Kind::kReplay;
        claim.status = static_cast<int>(row->Int(2));
        claim.body = row->Text(3);
        return claim;
      }
      if (tx.now() - row->Int(4) < abandon_after_us) {
        claim.kind = IdempotencyClaim::Kind::kInProgress;
        return claim;
      }
      FP_TRY(tx.Exec("DELETE FROM idempotency_key WHERE token_id = ? AND key = ?", token_id, key));
    }
    FP_TRY(
        tx.Exec("INSERT INTO idempotency_key (token_id, key, request_sha256, state, time_created) "
                "VALUES (?, ?, ?, 'pending', ?)",
                token_id, key, request_sha256, tx.now()));
    return claim;
  });
}

Status IdempotencyFinish(Datastore& ds, const Uuid& token_id, const std::string& key, int status,
                         const std::string& body) {
  return ds
      .Write<bool>([&](Tx& tx) -> Result<bool> {
        FP_TRY(
            tx.Exec("UPDATE idempotency_key SET state = 'done', status = ?, body = ? WHERE "
                    "token_id = ? AND key = ?",
                    status, body, token_id, key));
        return true;
      })
      .map([](bool) {});
}

Status IdempotencyAbandon(Datastore& ds, const Uuid& token_id, const std::string& key) {
  return ds
      .Write<bool>([&](Tx& tx) -> Result<bool> {
        FP_TRY(
            tx.Exec("DELETE FROM idempotency_key WHERE token_id = ? AND key = ? AND "
                    "state = 'pending'",
                    token_id, key));
        return true;
      })
      .map([](bool) {});
}

// --- Bounded history ---

Result<int64_t> IdempotencyPrune(Datastore& ds, int64_t retention_us, int64_t limit) {
  return ds.Write<int64_t>([&](Tx& tx) -> Result<int64_t> {
    // Oldest first through idempotency_key_by_age (schema migration 5).
    int64_t pruned = FP_TRY(
        tx.Exec("DELETE FROM idempotency_key WHERE (token_id, key) IN (SELECT token_id, key FROM "
                "idempotency_key WHERE time_created < ? ORDER BY time_created LIMIT ?)",
                tx.now() - retention_us, limit));
    FP_CHECK_OK(CounterAddIn(tx, "idempotency_keys_pruned", pruned));
    return pruned;
  });
}

Result<int64_t> IdempotencyKeysPruned(Datastore& ds) {
  return ds.Read<int64_t>(
      [](Tx& tx) -> Result<int64_t> { return CounterValueIn(tx, "idempotency_keys_pruned"); });
}

}  // namespace fp::db
