#pragma once

// The persistent saga log in the datastore: the saga engine's store (saga/store.h) over the
// saga tables, plus what operators and history pruning need of them.

#include <optional>
#include <string>
#include <vector>

#include "db/datastore.h"
#include "saga/store.h"

namespace fp::db {

// The log's types are the engine's (saga/store.h).
using saga::ParseSagaEventType;
using saga::ParseSagaState;
using saga::SagaEvent;
using saga::SagaEventType;
using saga::SagaLog;
using saga::SagaOwner;
using saga::SagaRow;
using saga::SagaState;
using saga::ToString;

// The saga engine's store over the datastore. Every Write is one datastore write transaction
// (group-committed with other writes, retried as a whole on SQLITE_BUSY), whose StoreTx is the
// db::Tx the actions' run_in_tx/undo_in_tx functions take. A saga created for a request
// records, in the same transaction, what its origin (db::RequestSaga) says: the request's
// idempotency key and audit entry; the transaction that brings it to rest completes that entry
// (SagaRecordIn). Thread-safe; `ds` must outlive it.
class DatastoreSagaStore final : public saga::SagaStore {
 public:
  explicit DatastoreSagaStore(Datastore& ds) : ds_(ds) {}

  Status Write(const std::function<Status(saga::StoreTx&)>& body) override;
  Result<bool> CreateIn(saga::StoreTx& tx, const SagaRow& row,
                        const saga::SagaOrigin* origin) override;
  Status RecordIn(saga::StoreTx& tx, const Uuid& saga_id, const SagaOwner& owner,
                  const std::optional<SagaEvent>& event, std::optional<SagaState> new_state,
                  const std::optional<std::string>& result) override;
  Status RecordAllIn(saga::StoreTx& tx, const Uuid& saga_id, const SagaOwner& owner,
                     const saga::SagaRecord& record) override;
  Result<SagaLog> Load(const Uuid& id) override;
  Result<std::vector<saga::OwnedSaga>> ListUnfinished(const std::string& sec) override;
  Result<std::optional<int64_t>> Claim(const Uuid& id, const SagaOwner& owner) override;
  Result<bool> MarkStuck(const Uuid& id, const SagaOwner& owner,
                         const std::string& result) override;

 private:
  Datastore& ds_;
};

// Inserts the saga row unless a saga with this id exists, then what `origin` records with it.
// Returns true if it inserted.
Result<bool> SagaCreateIn(Tx& tx, const SagaRow& row, const saga::SagaOrigin* origin = nullptr);
// Appends an event (idempotent: a duplicate of an existing event is ignored) and, if given,
// moves the saga to `new_state` with `result`. saga::LostSagaError (ServiceUnavailable) if
// `owner` (sec and generation) no longer owns the saga: the caller's transaction must then roll
// back, the action's own changes in it included.
Status SagaRecordIn(Tx& tx, const Uuid& saga_id, const SagaOwner& owner,
                    const std::optional<SagaEvent>& event, std::optional<SagaState> new_state,
                    const std::optional<std::string>& result);

// A saga's result from its row's `stored` result and its events: a done saga's row keeps NULL
// where the result is its last node's output, logged as that node's "succeeded" event (the
// event of the highest node).
std::optional<std::string> SagaResultOf(SagaState state, std::optional<std::string> stored,
                                        const std::vector<SagaEvent>& events);

// What one transaction records at once (saga::SagaStore::RecordAllIn), for a record with
// events whose transaction checks the owner by writing the saga's row (the new state's update
// here, or the insert that created it, SagaCreateIn earlier in `tx`; Internal otherwise): the
// events go in one statement, without a look of their own at the row.
Status SagaRecordAllIn(Tx& tx, const Uuid& saga_id, const SagaOwner& owner,
                       const saga::SagaRecord& record);

// NotFound if no such saga.
Result<SagaLog> SagaLoad(Datastore& ds, const Uuid& id);
// Sagas owned by `sec` that are running or unwinding, oldest first, with their generations.
Result<std::vector<saga::OwnedSaga>> SagaListUnfinished(Datastore& ds, const std::string& sec);
// saga::SagaStore::Claim: increments the adoption generation of an unfinished saga `owner`
// owns; returns the new generation, or nullopt if `owner` does not own it or it is at rest.
Result<std::optional<int64_t>> SagaClaim(Datastore& ds, const Uuid& id, const SagaOwner& owner);
// Moves an unfinished saga owned by `owner` (sec and generation) to stuck with `result` (JSON),
// whatever its log holds: for a saga that cannot be resumed, so that operators see it. Returns
// false if the saga is at rest already or no longer owned by `owner`.
Result<bool> SagaMarkStuck(Datastore& ds, const Uuid& id, const SagaOwner& owner,
                           const std::string& result);
// Every saga's id, name and state (for operators and tests), newest first, at most `limit`.
struct SagaSummary {
  Uuid id;
  std::string name;
  SagaState state = SagaState::kRunning;
};
Result<std::vector<SagaSummary>> SagaListStates(Datastore& ds, int64_t limit);
// The saga's state, or nullopt if there is no such saga (never made, or pruned long after it
// came to rest).
Result<std::optional<saga::SagaState>> SagaStateOf(Datastore& ds, const Uuid& id);

// --- Bounded history ---

// Deletes, oldest first, at most `limit` sagas that came to rest as done or unwound more than
// `retention_us` before the transaction's time (their time_modified), with their node events,
// in one write transaction, and adds the number to counter 'sagas_pruned'. Never a stuck saga
// (it waits for a human) nor an unfinished one. Returns how many it deleted: fewer than
// `limit` means none is left to prune. Cost: one index probe and a few page writes per saga
// (schema migration 5). Thread-safe.
Result<int64_t> SagaPruneFinished(Datastore& ds, int64_t retention_us, int64_t limit);

// The saga tables' size and what pruning removed since the database was created.
struct SagaHistoryStats {
  int64_t saga_rows = 0;     // every saga, whatever its state
  int64_t sagas_pruned = 0;  // deleted by SagaPruneFinished
};
// One read of two counter rows, whatever the size of the tables (SQLite), or of a counter row
// and the saga table's row count (PostgreSQL, where one row updated by every saga insert would
// serialize them). On PostgreSQL the rows are counted while the planner's statistics put the
// table at `exact_up_to` rows or fewer (or it has none yet); past that, saga_rows is the
// planner's estimate scaled to the table's current size, as the planner makes it (within a few
// percent), so that a metrics scrape never reads a history of millions of rows. For metrics:
// it does not wait for the log's sync, so it may count commits a crash would still undo.
inline constexpr int64_t kExactSagaRows = 100'000;
Result<SagaHistoryStats> SagaHistory(Datastore& ds, int64_t exact_up_to = kExactSagaRows);

}  // namespace fp::db
