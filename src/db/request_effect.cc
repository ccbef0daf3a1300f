#include "db/request_effect.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "db/audit_log.h"
#include "db/idempotency.h"

namespace fp::db {

namespace {

// The entry completed with `answer` at `now`: an error answer's body is the API's error body
// ({request_id, error_code, message}).
model::AuditEntry Completed(model::AuditEntry e, Timestamp now, const EffectAnswer& answer) {
  e.time_completed = now;
  e.http_status = answer.status;
  e.saga_id.reset();
  if (answer.status < 400) {
    e.result = model::AuditResultKind::kSuccess;
    return e;
  }
  e.result = model::AuditResultKind::kError;
  auto body = nlohmann::json::parse(answer.body, nullptr, false);
  if (body.is_object()) {
    if (body.contains("error_code") && body["error_code"].is_string()) {
      e.error_code = body["error_code"].get<std::string>();
    }
    if (body.contains("message") && body["message"].is_string()) {
      e.error_message = body["message"].get<std::string>();
    }
  }
  if (e.error_message.empty()) e.error_message = fmt::format("HTTP {}", answer.status);
  return e;
}

}  // namespace

Status RequestEffect::InsertKeyIn(Tx& tx, const std::optional<EffectAnswer>& answer,
                                  const std::optional<Uuid>& saga) {
  bool inserted = FP_TRY(
      IdempotencyInsertIn(tx, key_->token_id, key_->key, key_->request_sha256,
                          answer ? std::optional<int>(answer->status) : std::nullopt,
                          answer ? std::optional<std::string>(answer->body) : std::nullopt, saga));
  if (!inserted) {
    // Another request (another server on this database) recorded the key first: this
    // request's effect must not commit; it answers from that record.
    tx.OnOutcome([this](bool) { outcome_ = Outcome::kTaken; });
    return Fail(Error::Unavailable(
        fmt::format("a request with Idempotency-Key \"{}\" is in progress; retry when it completes",
                    key_->key)));
  }
  return Ok();
}

Status RequestEffect::CheckDeadline(Timestamp now) const {
  if (deadline_ == 0 || now <= deadline_ || outcome_ != Outcome::kNone || entry_recorded_) {
    return Ok();
  }
  return Fail(Error::Unavailable(fmt::format(
      "the request waited {} ms, past the server's --request-deadline, before its change could "
      "be made: nothing was changed; retry",
      (now - entry_.time_started) / 1000)));
}

Status RequestEffect::RecordAnswerIn(Tx& tx, const EffectAnswer& answer) {
  FP_CHECK_OK(CheckDeadline(tx.now()));
  if (outcome_ != Outcome::kNone || entry_complete_) return Ok();
  if (key_) FP_CHECK_OK(InsertKeyIn(tx, answer, std::nullopt));
  model::AuditEntry completed = Completed(entry_, tx.now(), answer);
  FP_CHECK_OK(AuditFinishIn(tx, completed));
  tx.OnOutcome([this, answer, completed = std::move(completed)](bool committed) {
    if (!committed) return;
    outcome_ = Outcome::kAnswered;
    answer_ = answer;
    entry_ = completed;
    entry_recorded_ = true;
    entry_complete_ = true;
  });
  return Ok();
}

Status RequestEffect::RecordSagaIn(Tx& tx, const Uuid& saga_id, bool ends_request) {
  FP_CHECK_OK(CheckDeadline(tx.now()));
  bool link_key = key_ && outcome_ == Outcome::kNone;
  if (link_key) FP_CHECK_OK(InsertKeyIn(tx, std::nullopt, saga_id));
  // The entry names the saga carrying the request now, whether or not its end completes it,
  // so that a running saga keeps it from being taken for cut short.
  if (!entry_recorded_) {
    model::AuditEntry e = entry_;
    e.saga_id = saga_id;
    e.saga_completes = ends_request;
    FP_CHECK_OK(AuditInsertIn(tx, e));
  } else if (!entry_complete_) {
    FP_CHECK_OK(AuditLinkSagaIn(tx, entry_.id, saga_id, ends_request));
  }
  tx.OnOutcome([this, saga_id, ends_request](bool committed) {
    if (!committed) return;
    if (outcome_ == Outcome::kNone) {
      outcome_ = Outcome::kSaga;
      saga_id_ = saga_id;
    }
    entry_recorded_ = true;
    if (ends_request) entry_complete_ = true;
  });
  return Ok();
}

Status RequestEffect::RecordIntent(Datastore& ds) {
  if (entry_recorded_) return Ok();
  FP_CHECK_OK(ds.Write([&](Tx& tx) -> Status {
    FP_CHECK_OK(CheckDeadline(tx.now()));
    FP_CHECK_OK(AuditInsertIn(tx, entry_));  // in progress: time_completed 0
    return Ok();
  }));
  entry_recorded_ = true;
  return Ok();
}

Status RequestEffect::Finish(Datastore& ds, const EffectAnswer& answer, bool keep_answer) {
  keep_answer = keep_answer && key_.has_value();
  if (entry_complete_ && !keep_answer) return Ok();
  return ds.Write([&](Tx& tx) -> Status {
    if (keep_answer) {
      FP_CHECK_OK(IdempotencyFinishIn(tx, key_->token_id, key_->key, key_->request_sha256,
                                      answer.status, answer.body));
    }
    if (!entry_complete_) FP_CHECK_OK(AuditFinishIn(tx, Completed(entry_, tx.now(), answer)));
    return Ok();
  });
}

Status RequestSaga::RecordIn(saga::StoreTx& tx, const Uuid& saga_id) const {
  if (effect_ == nullptr) return Ok();
  // The datastore's saga store hands its own transactions to the engine (db/sagas.h).
  return effect_->RecordSagaIn(static_cast<Tx&>(tx), saga_id, ends_request_);
}

std::string_view RequestSaga::request_id() const {
  if (effect_ == nullptr) return {};
  return effect_->entry().request_id;
}

std::optional<std::string> RequestSaga::Describe() const {
  if (effect_ == nullptr) return std::nullopt;
  const model::AuditEntry& e = effect_->entry();
  // The object {"request_id", "operation_id", "audit_entry_id", and "actor" when a user acts}
  // as nlohmann writes it (keys sorted), written without building it: every saga a request
  // starts keeps one.
  auto text = [](const std::string& s) { return nlohmann::json(s).dump(); };
  std::string out = "{";
  if (e.actor_user_id) {
    fmt::format_to(std::back_inserter(out),
                   R"("actor":{{"kind":"silo_user","silo_id":"{}","silo_user_id":"{}"}},)",
                   e.actor_silo_id->ToString(), e.actor_user_id->ToString());
  }
  fmt::format_to(std::back_inserter(out), R"("audit_entry_id":"{}","operation_id":{},)",
                 e.id.ToString(), text(e.operation_id));
  fmt::format_to(std::back_inserter(out), R"("request_id":{}}})", text(e.request_id));
  return out;
}

}  // namespace fp::db
