#pragma once

// Idempotency keys for mutating requests (product.md difference 13), exact across crashes.
//
// A keyed request's record commits in the same transaction as the request's effect, never in
// a transaction of its own before it, so a crash at any instant leaves either both or neither:
//
//  - A request whose effect is one datastore write (create a floating IP, a project, a pool,
//    stop an instance, ...) passes that write its RequestEffect (db/request_effect.h), whose
//    renderer turns the write's result into the answer (status, body); the write inserts the
//    'done' record in its own transaction. A crash before that commit leaves neither effect
//    nor record: the retry runs the request once. A crash after it leaves both: the retry gets
//    the answer.
//  - A request carried by a saga links the key to the saga in the commit that creates the saga
//    row (the saga's origin, RequestSaga): a 'saga' record. A retry derives the answer from the
//    saga's outcome (the API's replay of that endpoint), 503 with Retry-After while it still runs,
//    e.g. being recovered after a restart. A saga that unwound undid its effect: with a 5xx error
//    the record is forgotten and the retry runs the request again; with a 4xx it is the answer.
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

// Inside the effect's transaction: inserts the key's record, 'done' with (status, body) or
// 'saga' linked to `saga_id`. Returns false (inserting nothing) if the key has a record.
Result<bool> IdempotencyInsertIn(Tx& tx, const Uuid& token_id, const std::string& key,
                                 const std::string& request_sha256, std::optional<int> status,
                                 const std::optional<std::string>& body,
                                 const std::optional<Uuid>& saga_id);
// IdempotencyFinish inside the caller's transaction.
Status IdempotencyFinishIn(Tx& tx, const Uuid& token_id, const std::string& key,
                           const std::string& request_sha256, int status, const std::string& body);

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
