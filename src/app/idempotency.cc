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

KeyedRequest::KeyedRequest(Idempotency& idempotency, const Uuid& token_id, std::string key,
                           std::string request_sha256)
    : scope_(std::make_unique<db::IdempotencyScope>(idempotency.ds_, token_id, std::move(key),
                                                    std::move(request_sha256))) {}

KeyedRequest::~KeyedRequest() = default;

void KeyedRequest::AnswerWithType(const std::type_info& type,
                                  std::function<KeyAnswer(const void*)> render) {
  scope_->AnswerWithType(type, [render = std::move(render)](const void* result) {
    KeyAnswer a = render(result);
    return db::IdempotencyScope::Answer{a.status, std::move(a.body)};
  });
}

void KeyedRequest::AnswerWithoutResult(KeyAnswer answer) {
  scope_->AnswerWithoutResult({answer.status, std::move(answer.body)});
}

KeyedRequest::Effect KeyedRequest::effect() const {
  switch (scope_->effect()) {
    case db::IdempotencyScope::Effect::kNone:
      return Effect::kNone;
    case db::IdempotencyScope::Effect::kAnswered:
      return Effect::kAnswered;
    case db::IdempotencyScope::Effect::kSaga:
      return Effect::kSaga;
    case db::IdempotencyScope::Effect::kTaken:
      return Effect::kTaken;
  }
  return Effect::kNone;
}

KeyAnswer KeyedRequest::answer() const {
  return KeyAnswer{scope_->answer().status, scope_->answer().body};
}

}  // namespace fp::app
