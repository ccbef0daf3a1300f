#pragma once

// Idempotency keys for mutating requests (product.md difference 13), exact across crashes.
//
// A keyed request's record commits in the same transaction as the request's effect, never in
// a transaction of its own before it, so a crash at any instant leaves either both or neither:
//
//  - A request whose effect is one datastore write (create a floating IP, a project, a pool,
//    stop an instance, ...) runs inside an IdempotencyScope whose renderer turns that write's
//    typed result into the answer (status, body). The first write of that type the request
//    commits inserts the 'done' record in its own transaction (Datastore::Write consults the
//    scope). A crash before that commit leaves neither effect nor record: the retry runs the
//    request once. A crash after it leaves both: the retry gets the answer.
//  - A request carried by a saga links the key to the saga in the commit that creates the saga
//    row (SagaCreateIn): a 'saga' record. A retry derives the answer from the saga's outcome
//    (the API's replay of that endpoint), 503 with Retry-After while it still runs, e.g. being
//    recovered after a restart. A saga that unwound undid its effect: with a 5xx error the
//    record is forgotten and the retry runs the request again; with a 4xx it is the answer.
//  - A request that ends without an effect (a refusal), or whose final answer differs from
//    what its effect recorded (a saga's, or a later step's), stores its answer afterwards
//    (IdempotencyFinish): nothing it did can be separated from that record by a crash. 5xx
//    answers are never stored: a retry does the work (or finds the effect's record).
//
// "In progress" exists only in the memory of the process running the request (the API keeps
// the keys in flight): there is no claim row a dead server could leave behind, so a restarted
// server never answers 503 for a request that never committed. Two processes sharing the
// database cannot both apply the effect either: the record's primary key makes the second
// effect's transaction fail (Effect::kTaken), and that request answers from the first's
// record.
//
// Records carry time_created (the first commit's time), indexed, for pruning by age. A 'saga'
// record needs its saga's history until it is answered: the API turns it into a 'done' record
// at the first replay (and a request that completes does at once); one whose saga was pruned
// first is refused with 422. Pruning should therefore keep sagas no shorter than records.
//
// Which answers must never be stored (a token's secret) is the API's decision: it refuses keys
// on those requests.

#include <functional>
#include <optional>
#include <string>
#include <typeinfo>

#include "db/datastore.h"

namespace fp::db {

// A key's record as stored.
struct IdempotencyRecord {
  std::string request_sha256;
  bool done = false;  // true: `status` and `body` are the answer; false: `saga_id` carries it
  int status = 0;
  std::string body;
  std::optional<Uuid> saga_id;
};

// The record of (token, key), if any.
Result<std::optional<IdempotencyRecord>> IdempotencyLookup(Datastore& ds, const Uuid& token_id,
                                                           const std::string& key);
// Stores the answer of a request whose effect is already recorded or never happened: inserts a
// 'done' record, or turns the key's 'saga' or 'done' record for the same request into one with
// this answer. A record of another request under the key is left alone.
Status IdempotencyFinish(Datastore& ds, const Uuid& token_id, const std::string& key,
                         const std::string& request_sha256, int status, const std::string& body);
// Forgets the key's link to `saga_id` (a saga that unwound: its effect is undone), so that a
// retry runs the request again. Nothing happens if the key records something else.
Status IdempotencyForgetSaga(Datastore& ds, const Uuid& token_id, const std::string& key,
                             const Uuid& saga_id);

// A keyed request in progress on this thread: what its writes through `ds` record with their
// effect. Installed by the constructor for the calling thread until destroyed (scopes do not
// nest). Used by one request thread; Datastore::Write runs its writes' bodies on whichever
// thread leads the commit while the request thread waits, and hands the scope over (see
// IdempotencyInWrite).
class IdempotencyScope {
 public:
  struct Answer {
    int status = 0;
    std::string body;
  };
  enum class Effect {
    kNone,      // nothing committed under the key yet
    kAnswered,  // a write committed the answer `answer()` with its effect
    kSaga,      // a saga was created under the key: `saga_id()`
    kTaken,     // another request recorded the key first; this one's write was rolled back
  };

  IdempotencyScope(Datastore& ds, const Uuid& token_id, std::string key,
                   std::string request_sha256);
  ~IdempotencyScope();
  IdempotencyScope(const IdempotencyScope&) = delete;
  IdempotencyScope& operator=(const IdempotencyScope&) = delete;

  // The request's first committed write whose result is a `T` records `render(result)` with
  // its effect. Without a renderer, no write records an answer (only sagas link the key).
  template <typename T>
  void AnswerWith(std::function<Answer(const T&)> render) {
    AnswerWithType(typeid(T), [render = std::move(render)](const void* result) {
      return render(*static_cast<const T*>(result));
    });
  }
  // The same with the result's type named at run time: `render` gets a `const type*`.
  void AnswerWithType(const std::type_info& type, std::function<Answer(const void*)> render) {
    render_type_ = &type;
    render_ = std::move(render);
  }
  // Same for a write that returns only success (a Status): the answer is fixed.
  void AnswerWithoutResult(Answer answer) {
    render_type_ = &typeid(void);
    render_ = [answer = std::move(answer)](const void*) { return answer; };
  }

  Effect effect() const { return effect_; }
  const Answer& answer() const { return answer_; }  // kAnswered
  const Uuid& saga_id() const { return saga_id_; }  // kSaga

  // --- for the datastore ---
  // The scope of the write running on this thread, if it was made through `ds`.
  static IdempotencyScope* Current(const Datastore& ds);
  // Inside a write's transaction: the scope of that write (see IdempotencyInWrite).
  static IdempotencyScope* OfWriteInProgress();
  // Inside a write's transaction, after its body succeeded with `result` of `type` (nullptr
  // and void for a Status write): inserts the record if this is the write that answers.
  // Unavailable (rolling the write back) if another request recorded the key first.
  Status RecordIn(Tx& tx, const void* result, const std::type_info& type);
  // Inside the transaction that creates saga `saga_id`: links the key to it unless the request
  // already recorded something. Unavailable as above.
  Status LinkSagaIn(Tx& tx, const Uuid& saga_id);
  // At the start of each run of a write's body: an engine may run a body again (PostgreSQL's
  // retries), and what a rolled-back run recorded is undone with it.
  void BeginAttempt() { pending_ = Effect::kNone; }
  // After the write: what RecordIn/LinkSagaIn did counts only if it committed.
  void Settle(bool committed);

 private:
  Status InsertIn(Tx& tx, const std::optional<Answer>& answer, const std::optional<Uuid>& saga);

  Datastore& ds_;
  Uuid token_id_;
  std::string key_;
  std::string request_sha256_;
  const std::type_info* render_type_ = nullptr;
  std::function<Answer(const void*)> render_;
  IdempotencyScope* outer_;
  Effect effect_ = Effect::kNone;
  Answer answer_;
  Uuid saga_id_;
  // Set inside the write's transaction, made effect_ by Settle.
  Effect pending_ = Effect::kNone;
  Answer pending_answer_;
  Uuid pending_saga_;
};

// For the datastore: while alive, the scope of the write being run on this thread is `scope`
// (nullptr for a write made outside any keyed request), whichever thread made the write.
class IdempotencyInWrite {
 public:
  explicit IdempotencyInWrite(IdempotencyScope* scope);
  ~IdempotencyInWrite();
  IdempotencyInWrite(const IdempotencyInWrite&) = delete;
  IdempotencyInWrite& operator=(const IdempotencyInWrite&) = delete;

 private:
  IdempotencyScope* outer_;
};

// --- Bounded history ---

// Deletes, oldest first, at most `limit` records first committed more than `retention_us`
// before the transaction's time (a retry after that is a new request), in one write
// transaction, and adds the number to counter 'idempotency_keys_pruned'. Returns how many it
// deleted: fewer than `limit` means none is left to prune. Thread-safe. Called with the
// retention of SagaPruneFinished, a 'saga' record goes no later than its saga: the record was
// created with the saga, which is pruned by the time it came to rest.
Result<int64_t> IdempotencyPrune(Datastore& ds, int64_t retention_us, int64_t limit);
// Keys deleted by IdempotencyPrune since the database was created (without waiting for the
// log's sync, as SagaHistory).
Result<int64_t> IdempotencyKeysPruned(Datastore& ds);

}  // namespace fp::db
