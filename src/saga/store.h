#pragma once

// What the saga engine needs from persistent storage: the saga log (one row per saga, its node
// events) and transactions in which a node's database effect commits with its log events. The
// engine defines this interface; src/db implements it over the datastore (DatastoreSagaStore
// in db/sagas.h), and the engine's tests over memory (saga/testing/memory_store.h).
//
// Transactions. The engine writes through Write(): the store opens one write transaction, the
// engine's body runs in it, calling CreateIn, RecordIn and RecordAllIn to write the log and
// the action's `run_in_tx`/`undo_in_tx` for the node's effect, all on the same StoreTx, and the
// whole commits durably or not at all. So the guarantees of one transaction hold across the engine
// and the actions without the engine knowing what a transaction is: a database node's effect
// and its "succeeded" event commit together, and a new saga's row commits with its first
// database node. Whoever starts a saga may add writes of its own to the transaction that
// creates it (SagaOrigin: the server records the request's idempotency key and audit entry
// there), which the store runs and the engine never looks at.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/time.h"
#include "common/uuid.h"

namespace fp::saga {

enum class SagaState { kRunning, kUnwinding, kDone, kUnwound, kStuck };
std::string_view ToString(SagaState s);
std::optional<SagaState> ParseSagaState(std::string_view text);

enum class SagaEventType {
  kStarted,
  kSucceeded,
  kFailed,
  kUndoStarted,
  kUndoFinished,
  kUndoFailed
};
std::string_view ToString(SagaEventType t);
std::optional<SagaEventType> ParseSagaEventType(std::string_view text);

// Which saga execution coordinator owns a saga, and in which adoption generation. Every write
// to the saga's log is conditional on both.
struct SagaOwner {
  std::string sec;
  int64_t generation = 1;
  bool operator==(const SagaOwner&) const = default;
};

// A saga a coordinator owns, with the generation it owns it in.
struct OwnedSaga {
  Uuid id;
  int64_t generation = 1;
  bool operator==(const OwnedSaga&) const = default;
};

// The error of a write refused because `owner` no longer owns the saga (fencing): another
// server adopted it (or this server's coordinator took it over again under a newer
// generation) and carries it on. ServiceUnavailable, so a request waiting on the saga gets a
// 503 telling the client to retry: the retry (same Idempotency-Key) finds the saga's outcome.
Error LostSagaError(const Uuid& saga_id, const SagaOwner& owner);
// Whether `e` is LostSagaError's.
bool IsLostSaga(const Error& e);
// The error of a saga created under an id another saga's log has (Internal: ids are random, so
// this is a bug or a corrupted log); a store's CreateIn may fail its transaction with it.
Error SagaExistsError(const Uuid& saga_id);
bool IsSagaExists(const Error& e);

struct SagaRow {
  Uuid id;
  std::string name;
  std::string dag;  // JSON: name, params, nodes
  SagaState state = SagaState::kRunning;
  SagaOwner owner;
  int64_t engine_version = 1;
  std::optional<std::string> result;  // JSON: the output (done) or the error (unwound, stuck)
  Timestamp time_created = 0;
  // JSON, opaque to the engine: who started the saga (SagaOrigin::Describe), for operators.
  std::optional<std::string> origin;
};

struct SagaEvent {
  int node_index = 0;
  SagaEventType type = SagaEventType::kStarted;
  std::optional<std::string> data;  // JSON output or error
};

// What one transaction records of a saga at once (SagaStore::RecordAllIn): its events, in
// order, and, if given, the saga's new state with its result.
struct SagaRecord {
  std::vector<SagaEvent> events;
  std::optional<SagaState> new_state;
  std::optional<std::string> result;
};

struct SagaLog {
  SagaRow saga;
  std::vector<SagaEvent> events;  // in node_index order
};

// A write transaction of a store, open while SagaStore::Write runs its body. The engine never
// looks inside: it hands it back to the store (CreateIn, RecordIn) and to the actions that
// change the database in it, which know the store's concrete type (db::Tx for the datastore;
// see TxFunction in saga/dag.h). Owned by the store; valid only during the body.
class StoreTx {
 public:
  virtual ~StoreTx() = default;

  // Asks that this transaction wait, before it reads anything, for the transactions that asked
  // the same before it to end, so that transactions that all change one row (the NAT version
  // counter) never conflict with each other over it: they run one after the other instead of
  // failing and running again. Only before the transaction's first statement; nothing on a
  // store whose writes run one at a time anyway (this default).
  virtual void JoinWriteQueue() {}

 protected:
  StoreTx() = default;
  StoreTx(const StoreTx&) = default;
  StoreTx& operator=(const StoreTx&) = default;
};

// What the starter of a saga records in the transaction that creates the saga, with it: the
// store calls RecordIn inside CreateIn once it inserted the row. The engine only passes it
// along. Must stay valid while the saga is being created (Run, RunNew).
class SagaOrigin {
 public:
  virtual ~SagaOrigin() = default;
  virtual Status RecordIn(StoreTx& tx, const Uuid& saga_id) const = 0;
  // What the saga's row keeps of its starter (JSON: the request's id, actor, operation), shown
  // to operators who ask why the saga ran.
  virtual std::optional<std::string> Describe() const = 0;
  // The id of the request the saga serves, which its agent calls and log lines name; empty for
  // none. What Describe() says of it, at hand without reading that text again.
  virtual std::string_view request_id() const { return {}; }
};

// The persistent saga log. Implementations are thread-safe: an executor runs several sagas at
// once, each on its caller's thread.
class SagaStore {
 public:
  virtual ~SagaStore() = default;

  // Runs `body` in one write transaction and commits it durably if `body` succeeds; returns
  // once the commit is durable. `body` failing rolls back everything written in the
  // transaction and returns its error. The store may run `body` again (a conflict it retries),
  // so `body` must keep nothing from a failed run. Errors besides `body`'s: the store's own
  // (the datastore's: Internal; on PostgreSQL, Unavailable when conflicts or a lost
  // database outlast the retry deadline).
  virtual Status Write(const std::function<Status(StoreTx&)>& body) = 0;

  // --- Steps inside Write's transaction (`tx` is the one Write passed to the body) ---

  // Inserts the saga row unless a saga with this id exists, and then what `origin` (if any)
  // records with it. Returns true if it inserted, false if the id is taken; or true, and the
  // transaction fails later (at its next statement or its commit) with SagaExistsError when
  // the store holds the insert back (the datastore's, Tx::ExecLater).
  virtual Result<bool> CreateIn(StoreTx& tx, const SagaRow& row, const SagaOrigin* origin) = 0;
  // Appends an event (idempotent: a duplicate of an existing event, same node and type, is
  // ignored) and, if given, moves the saga to `new_state` with `result`. LostSagaError if
  // `owner` (sec and generation) no longer owns the saga: nothing is written, the caller's
  // transaction must roll back (Write does, as the body fails) and the caller must stop
  // driving the saga (fencing).
  virtual Status RecordIn(StoreTx& tx, const Uuid& saga_id, const SagaOwner& owner,
                          const std::optional<SagaEvent>& event, std::optional<SagaState> new_state,
                          const std::optional<std::string>& result) = 0;

  // RecordIn for what one transaction records at once, with the same guarantees (idempotent
  // events, LostSagaError and nothing written when `owner` no longer owns the saga). A store may
  // write the events in one statement and leave their owner check to a write of the saga's row
  // in the same transaction (the state's, or CreateIn's). An event twice in one record is
  // written once, the first. The default calls RecordIn per event, the state with the last one.
  virtual Status RecordAllIn(StoreTx& tx, const Uuid& saga_id, const SagaOwner& owner,
                             const SagaRecord& record);

  // --- One transaction each ---

  // The saga's row and every event. NotFound if no such saga. Durable: what it returns survives
  // a crash.
  virtual Result<SagaLog> Load(const Uuid& id) = 0;
  // Sagas owned by `sec` that are running or unwinding, oldest first, with the generation
  // `sec` owns each in.
  virtual Result<std::vector<OwnedSaga>> ListUnfinished(const std::string& sec) = 0;
  // Takes the saga over again under a new generation: if `owner` owns it (sec and generation)
  // and it is running or unwinding, increments its adoption generation and returns the new
  // one, so that every other execution of it (a zombie of an earlier process under the same
  // id) is fenced from then on. nullopt if `owner` does not own it (any more) or it is at rest.
  virtual Result<std::optional<int64_t>> Claim(const Uuid& id, const SagaOwner& owner) = 0;
  // Moves an unfinished saga owned by `owner` (sec and generation) to stuck with `result`
  // (JSON), whatever its log holds. Returns false if the saga is at rest already or no longer
  // owned by `owner`.
  virtual Result<bool> MarkStuck(const Uuid& id, const SagaOwner& owner,
                                 const std::string& result) = 0;

  // CreateIn and RecordIn in a transaction of their own.
  Result<bool> Create(const SagaRow& row, const SagaOrigin* origin = nullptr);
  Status Record(const Uuid& saga_id, const SagaOwner& owner, const std::optional<SagaEvent>& event,
                std::optional<SagaState> new_state, const std::optional<std::string>& result);
};

}  // namespace fp::saga
