#include "app/idempotency.h"

#include "common/sha256.h"
#include "db/datastore.h"
#include "db/idempotency.h"
#include "db/sagas.h"
#include "saga/saga.h"

namespace fp::app {

std::string Idempotency::RequestHash(const std::string& request) { return Sha256Hex(request); }

Result<KeyRecall> Idempotency::Recall(const Uuid& token_id, const std::string& key,
                                      const std::string& request_sha256) {
  using Outcome = KeyRecall::Outcome;
  KeyRecall recall;
  auto record = FP_TRY(db::IdempotencyLookup(ds_, token_id, key));
  if (!record) return recall;
  const db::IdempotencyRecord& r = *record;
  if (r.request_sha256 != request_sha256) {
    recall.outcome = Outcome::kOtherRequest;
    return recall;
  }
  if (r.done) {
    recall.outcome = Outcome::kAnswer;
    recall.answer = KeyAnswer{r.status, r.body};
    return recall;
  }
  auto log = db::SagaLoad(ds_, *r.saga_id);
  if (!log) {
    if (log.error().kind() != ErrorKind::kNotFound) return Fail(log.error());
    recall.outcome = Outcome::kSagaPruned;
    return recall;
  }
  saga::Json result = saga::Json::parse(log->saga.result.value_or("null"), nullptr, false);
  switch (log->saga.state) {
    case db::SagaState::kRunning:
    case db::SagaState::kUnwinding:
      recall.outcome = Outcome::kSagaRunning;
      return recall;
    case db::SagaState::kDone: {
      saga::Json dag = saga::Json::parse(log->saga.dag, nullptr, false);
      recall.outcome = Outcome::kSagaDone;
      recall.params =
          dag.is_object() ? dag.value("params", saga::Json::object()) : saga::Json::object();
      recall.output = std::move(result);
      return recall;
    }
    case db::SagaState::kUnwound:
    case db::SagaState::kStuck:
      break;
  }
  Error error = saga::ErrorFromJson(result);
  if (log->saga.state == db::SagaState::kUnwound && error.HttpStatus() >= 500) {
    FP_CHECK_OK(db::IdempotencyForgetSaga(ds_, token_id, key, *r.saga_id));
    return recall;  // kRun
  }
  recall.outcome = Outcome::kSagaFailed;
  recall.error = std::move(error);
  return recall;
}

Status Idempotency::Finish(const Uuid& token_id, const std::string& key,
                           const std::string& request_sha256, const KeyAnswer& answer) {
  return db::IdempotencyFinish(ds_, token_id, key, request_sha256, answer.status, answer.body);
}

}  // namespace fp::app
