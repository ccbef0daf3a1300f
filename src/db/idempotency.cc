#include "db/idempotency.h"

#include <fmt/format.h>

#include "db/counters.h"

namespace fp::db {

Result<std::optional<IdempotencyRecord>> IdempotencyLookup(Datastore& ds, const Uuid& token_id,
                                                           const std::string& key) {
  using Out = std::optional<IdempotencyRecord>;
  return ds.Read<Out>([&](Tx& tx) -> Result<Out> {
    auto row = FP_TRY(
        tx.QueryRow("SELECT request_sha256, state, status, body, saga_id FROM idempotency_key "
                    "WHERE token_id = ? AND key = ?",
                    token_id, key));
    if (!row) return Out();
    IdempotencyRecord r;
    r.request_sha256 = row->Text(0);
    r.done = row->Text(1) == "done";
    if (r.done) {
      r.status = static_cast<int>(row->Int(2));
      r.body = row->OptText(3).value_or("");
    } else {
      r.saga_id = FP_TRY(UuidColumn(*row, 4));
    }
    return Out(std::move(r));
  });
}

Status IdempotencyFinishIn(Tx& tx, const Uuid& token_id, const std::string& key,
                           const std::string& request_sha256, int status, const std::string& body) {
  FP_TRY(
      tx.Exec("INSERT INTO idempotency_key (token_id, key, request_sha256, state, status, body, "
              "time_created) VALUES (?, ?, ?, 'done', ?, ?, ?) ON CONFLICT (token_id, key) DO "
              "UPDATE SET state = 'done', status = excluded.status, body = excluded.body, "
              "saga_id = NULL WHERE idempotency_key.request_sha256 = excluded.request_sha256",
              token_id, key, request_sha256, status, body, tx.now()));
  return Ok();
}

Status IdempotencyFinish(Datastore& ds, const Uuid& token_id, const std::string& key,
                         const std::string& request_sha256, int status, const std::string& body) {
  return ds.Write(
      [&](Tx& tx) { return IdempotencyFinishIn(tx, token_id, key, request_sha256, status, body); });
}

Status IdempotencyForgetSaga(Datastore& ds, const Uuid& token_id, const std::string& key,
                             const Uuid& saga_id) {
  return ds
      .Write<bool>([&](Tx& tx) -> Result<bool> {
        FP_TRY(tx.Exec("DELETE FROM idempotency_key WHERE token_id = ? AND key = ? AND saga_id = ?",
                       token_id, key, saga_id));
        return true;
      })
      .map([](bool) {});
}

Result<bool> IdempotencyInsertIn(Tx& tx, const Uuid& token_id, const std::string& key,
                                 const std::string& request_sha256, std::optional<int> status,
                                 const std::optional<std::string>& body,
                                 const std::optional<Uuid>& saga_id) {
  int64_t inserted = FP_TRY(tx.Exec(
      "INSERT INTO idempotency_key (token_id, key, request_sha256, state, status, body, saga_id, "
      "time_created) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (token_id, key) DO NOTHING",
      token_id, key, request_sha256, status ? "done" : "saga",
      status ? SqlValue(int64_t{*status}) : SqlValue(nullptr), body, saga_id, tx.now()));
  return inserted == 1;
}

// --- Bounded history ---

Result<int64_t> IdempotencyPrune(Datastore& ds, int64_t retention_us, int64_t limit) {
  // Nothing to prune, the usual case, costs one read and no durable commit. Each of these
  // looks (and the sagas' and the audit log's) orders by its index's key: PostgreSQL plans a
  // prepared statement once for any cutoff, and "< ? LIMIT 1" unordered, planned so, is a
  // sequential scan expected to stop at once, which reads the whole table when nothing is old
  // enough, the usual case (every second, on each server; history_test.cc).
  bool any = FP_TRY(ds.ReadLatest<bool>([&](Tx& tx) -> Result<bool> {
    auto row = FP_TRY(tx.QueryRow(
        "SELECT 1 FROM idempotency_key WHERE time_created < ? ORDER BY time_created LIMIT 1",
        tx.now() - retention_us));
    return row.has_value();
  }));
  if (!any) return int64_t{0};
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
  return ds.ReadLatest<int64_t>(
      [](Tx& tx) -> Result<int64_t> { return CounterValueIn(tx, "idempotency_keys_pruned"); });
}

}  // namespace fp::db
