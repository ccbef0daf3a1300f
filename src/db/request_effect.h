#pragma once

// What a request's effect commits with it, in the effect's own transaction: the answer under
// its Idempotency-Key (db/idempotency.h) and its audit entry (db/audit_log.h). So a crash at
// any instant leaves the effect with both or neither: no effect without its entry, no success
// entry (and no stored answer) for an effect that did not happen.
//
// The API makes one RequestEffect per mutating request and passes it, explicitly, down to the
// one write or saga creation that carries the effect:
//
//  - A request whose effect is one write (create a floating IP, a project, stop an instance)
//    passes an Effect<T> (db/datastore.h) to that Datastore::Write: once the body succeeded,
//    RecordAnswerIn inserts the key's 'done' record with the rendered answer and the completed
//    audit entry, in the same transaction.
//  - A request carried by a saga passes a RequestSaga as the saga's origin (saga/store.h): the
//    transaction that creates the saga links the key to it and inserts the entry in progress;
//    the transaction that brings the saga to rest completes the entry (db/sagas.cc). A request
//    that runs two sagas (create, then start) lets only the last complete the entry.
//  - A request that ends otherwise (a refusal, an answer its effect did not record, no effect
//    at all) records both afterwards, in one write (Finish), before its answer leaves.
//
// Not thread-safe: one request's, used by the thread that runs it (a write's body may run on
// the thread that leads a group commit while the request's thread waits for it; the outcome
// hooks run on the request's thread).

#include <optional>
#include <string>

#include "db/datastore.h"
#include "model/audit_log.h"
#include "saga/store.h"

namespace fp::db {

class RequestEffect {
 public:
  // The request's Idempotency-Key, if it sent one, as its record is keyed.
  struct Key {
    Uuid token_id;
    std::string key;
    std::string request_sha256;
  };
  enum class Outcome {
    kNone,      // nothing committed for the request yet
    kAnswered,  // a write committed the answer `answer()` with its effect
    kSaga,      // a saga was created for the request
    kTaken,     // another request recorded the key first; this one's write was rolled back
  };

  // `entry`: the request's audit entry as known at its start (id, time, who, what).
  // `deadline` (the datastore clock's time; 0: none): the latest its first effect may commit.
  // A write or saga creation that would commit the request's first effect later is refused,
  // rolled back (ServiceUnavailable, nothing done: the client has likely given up, and a retry
  // with its key runs it afresh); once something committed, the request goes on.
  RequestEffect(std::optional<Key> key, model::AuditEntry entry, Timestamp deadline = 0)
      : key_(std::move(key)), entry_(std::move(entry)), deadline_(deadline) {}
  RequestEffect(const RequestEffect&) = delete;
  RequestEffect& operator=(const RequestEffect&) = delete;

  Outcome outcome() const { return outcome_; }
  const EffectAnswer& answer() const { return answer_; }  // kAnswered
  const model::AuditEntry& entry() const { return entry_; }
  bool entry_recorded() const { return entry_recorded_; }
  // The request answers from its key's record (a replay): whatever it writes links nothing to
  // the key, which records the first request already.
  void ForgetKey() { key_.reset(); }
  // The status the request answers if the saga that carries it succeeds (201, 202, 204): set
  // by the API before it calls the service.
  void set_saga_success_status(int status) { entry_.success_status = status; }

  // Inside the effect's transaction, once its body succeeded: the key's answer and the
  // completed entry. Unavailable (rolling the effect back) if another request recorded the
  // key first.
  Status RecordAnswerIn(Tx& tx, const EffectAnswer& answer);
  // Inside the transaction that creates saga `saga_id`: links the key to it (unless the
  // request recorded something already) and records the entry in progress; `ends_request`:
  // the saga's end completes the entry. Unavailable as above.
  Status RecordSagaIn(Tx& tx, const Uuid& saga_id, bool ends_request);

  // Before a request changes something outside the datastore ahead of the write that carries
  // its effect (a stop asks the sled first): records the entry in progress, in a write of its
  // own, so that no such change is left without its entry; the effect's write, or Finish,
  // completes it, and a crash in between leaves it for CompleteCutShort.
  Status RecordIntent(Datastore& ds);
  // After the request, before its answer leaves: completes the entry with the answer (status,
  // and an error body's error_code and message) unless its effect did, and with `keep_answer`
  // stores the answer under the key (IdempotencyFinish), both in one write; nothing to write
  // costs nothing. The entry's completion time is the write's.
  Status Finish(Datastore& ds, const EffectAnswer& answer, bool keep_answer);

 private:
  Status InsertKeyIn(Tx& tx, const std::optional<EffectAnswer>& answer,
                     const std::optional<Uuid>& saga);
  // ServiceUnavailable if `now` is past the deadline and nothing of the request committed.
  Status CheckDeadline(Timestamp now) const;

  std::optional<Key> key_;
  model::AuditEntry entry_;
  Timestamp deadline_;
  Outcome outcome_ = Outcome::kNone;
  EffectAnswer answer_;
  Uuid saga_id_;
  bool entry_recorded_ = false;  // committed: complete, or in progress with a saga
  bool entry_complete_ = false;  // committed complete, or carried by a saga that completes it
};

// A saga's origin for a request: what the transaction creating the saga records of the
// request (RequestEffect::RecordSagaIn). Made for each saga the request starts.
class RequestSaga final : public saga::SagaOrigin {
 public:
  RequestSaga(RequestEffect* effect, bool ends_request)
      : effect_(effect), ends_request_(ends_request) {}
  Status RecordIn(saga::StoreTx& tx, const Uuid& saga_id) const override;
  std::optional<std::string> Describe() const override;
  std::string_view request_id() const override;

 private:
  RequestEffect* effect_;
  bool ends_request_;
};

// The Effect<T> of a request `rq` (app's RequestContext and Request<T>: its `effect` and its
// `render`, which returns an answer with `status` and `body`) for the write that carries it.
template <typename T, typename R>
Effect<T> EffectOf(const R& rq) {
  return Effect<T>{rq.effect, [&rq](const T& result) {
                     auto answer = rq.render(result);
                     return EffectAnswer{answer.status, std::move(answer.body)};
                   }};
}
// Same for a write that returns only success, answered `answer` (204 and no body).
template <typename R>
Effect<void> EffectOfNoContent(const R& rq) {
  return Effect<void>{rq.effect, EffectAnswer{204, ""}};
}

}  // namespace fp::db
