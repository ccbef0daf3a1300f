#include "db/idempotency.h"

#include <fmt/format.h>

#include "db/counters.h"

namespace fp::db {

namespace {
// The scope of the write this thread runs now: the request's own, or while this thread leads
// a group commit, that of the write whose body it runs (IdempotencyInWrite).
thread_local IdempotencyScope* current_scope = nullptr;
}  // namespace

IdempotencyInWrite::IdempotencyInWrite(IdempotencyScope* scope) : outer_(current_scope) {
  current_scope = scope;
}

IdempotencyInWrite::~IdempotencyInWrite() { current_scope = outer_; }

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

Status IdempotencyFinish(Datastore& ds, const Uuid& token_id, const std::string& key,
                         const std::string& request_sha256, int status, const std::string& body) {
  return ds
      .Write<bool>([&](Tx& tx) -> Result<bool> {
        FP_TRY(tx.Exec(
            "INSERT INTO idempotency_key (token_id, key, request_sha256, state, status, body, "
            "time_created) VALUES (?, ?, ?, 'done', ?, ?, ?) ON CONFLICT (token_id, key) DO "
            "UPDATE SET state = 'done', status = excluded.status, body = excluded.body, "
            "saga_id = NULL WHERE idempotency_key.request_sha256 = excluded.request_sha256",
            token_id, key, request_sha256, status, body, tx.now()));
        return true;
      })
      .map([](bool) {});
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

IdempotencyScope::IdempotencyScope(Datastore& ds, const Uuid& token_id, std::string key,
                                   std::string request_sha256)
    : ds_(ds),
      token_id_(token_id),
      key_(std::move(key)),
      request_sha256_(std::move(request_sha256)),
      outer_(current_scope) {
  current_scope = this;
}

IdempotencyScope::~IdempotencyScope() { current_scope = outer_; }

IdempotencyScope* IdempotencyScope::Current(const Datastore& ds) {
  return current_scope != nullptr && &current_scope->ds_ == &ds ? current_scope : nullptr;
}

IdempotencyScope* IdempotencyScope::OfWriteInProgress() { return current_scope; }

Status IdempotencyScope::RecordIn(Tx& tx, const void* result, const std::type_info& type) {
  if (effect_ != Effect::kNone || pending_ != Effect::kNone || !render_ || *render_type_ != type) {
    return Ok();
  }
  return InsertIn(tx, render_(result), std::nullopt);
}

Status IdempotencyScope::LinkSagaIn(Tx& tx, const Uuid& saga_id) {
  if (effect_ != Effect::kNone || pending_ != Effect::kNone) return Ok();
  return InsertIn(tx, std::nullopt, saga_id);
}

Status IdempotencyScope::InsertIn(Tx& tx, const std::optional<Answer>& answer,
                                  const std::optional<Uuid>& saga) {
  int64_t inserted = FP_TRY(tx.Exec(
      "INSERT INTO idempotency_key (token_id, key, request_sha256, state, status, body, saga_id, "
      "time_created) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (token_id, key) DO NOTHING",
      token_id_, key_, request_sha256_, answer ? "done" : "saga",
      answer ? SqlValue(int64_t{answer->status}) : SqlValue(nullptr),
      answer ? SqlValue(answer->body) : SqlValue(nullptr), saga, tx.now()));
  if (inserted == 0) {
    // Another request (another server on this database) recorded the key first: this
    // request's effect must not commit; it answers from that record.
    pending_ = Effect::kTaken;
    return Fail(Error::Unavailable(fmt::format(
        "a request with Idempotency-Key \"{}\" is in progress; retry when it completes", key_)));
  }
  if (answer) {
    pending_ = Effect::kAnswered;
    pending_answer_ = *answer;
  } else {
    pending_ = Effect::kSaga;
    pending_saga_ = *saga;
  }
  return Ok();
}

void IdempotencyScope::Settle(bool committed) {
  if (pending_ == Effect::kTaken) {
    effect_ = Effect::kTaken;
  } else if (committed && pending_ == Effect::kAnswered) {
    effect_ = Effect::kAnswered;
    answer_ = std::move(pending_answer_);
  } else if (committed && pending_ == Effect::kSaga) {
    effect_ = Effect::kSaga;
    saga_id_ = pending_saga_;
  }
  pending_ = Effect::kNone;
}

// --- Bounded history ---

Result<int64_t> IdempotencyPrune(Datastore& ds, int64_t retention_us, int64_t limit) {
  // Nothing to prune, the usual case, costs one read and no durable commit.
  bool any = FP_TRY(ds.ReadLatest<bool>([&](Tx& tx) -> Result<bool> {
    auto row = FP_TRY(tx.QueryRow("SELECT 1 FROM idempotency_key WHERE time_created < ? LIMIT 1",
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
