#pragma once

// The persistent saga log: saga rows and their node events. Used only by src/saga/.

#include <optional>
#include <string>
#include <vector>

#include "db/datastore.h"

namespace fp::db {

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
};

struct SagaRow {
  Uuid id;
  std::string name;
  std::string dag;  // JSON: name, params, nodes
  SagaState state = SagaState::kRunning;
  SagaOwner owner;
  int64_t engine_version = 1;
  std::optional<std::string> result;  // JSON: the output (done) or the error (unwound, stuck)
  Timestamp time_created = 0;
};

struct SagaEvent {
  int node_index = 0;
  SagaEventType type = SagaEventType::kStarted;
  std::optional<std::string> data;  // JSON output or error
};

struct SagaLog {
  SagaRow saga;
  std::vector<SagaEvent> events;  // in (node_index, event order) order
};

// Inserts the saga row unless a saga with this id exists. Returns true if it inserted.
Result<bool> SagaCreateIn(Tx& tx, const SagaRow& row);
// Appends an event (idempotent: a duplicate of an existing event is ignored) and, if given,
// moves the saga to `new_state` with `result`. Unavailable if `owner` no longer owns the saga.
Status SagaRecordIn(Tx& tx, const Uuid& saga_id, const SagaOwner& owner,
                    const std::optional<SagaEvent>& event, std::optional<SagaState> new_state,
                    const std::optional<std::string>& result);

// Single-transaction conveniences on the datastore.
Result<bool> SagaCreate(Datastore& ds, const SagaRow& row);
Status SagaRecord(Datastore& ds, const Uuid& saga_id, const SagaOwner& owner,
                  const std::optional<SagaEvent>& event, std::optional<SagaState> new_state,
                  const std::optional<std::string>& result);
// NotFound if no such saga.
Result<SagaLog> SagaLoad(Datastore& ds, const Uuid& id);
// Sagas owned by `sec` that are running or unwinding, oldest first.
Result<std::vector<Uuid>> SagaListUnfinished(Datastore& ds, const std::string& sec);
// Moves an unfinished saga owned by `sec` to stuck with `result` (JSON), whatever its log
// holds: for a saga that cannot be resumed, so that operators see it. Returns false if the saga
// is at rest already or owned by another SEC.
Result<bool> SagaMarkStuck(Datastore& ds, const Uuid& id, const std::string& sec,
                           const std::string& result);
// Every saga's id, name and state (for operators and tests), newest first, at most `limit`.
struct SagaSummary {
  Uuid id;
  std::string name;
  SagaState state = SagaState::kRunning;
};
Result<std::vector<SagaSummary>> SagaListStates(Datastore& ds, int64_t limit);

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
// One read of two counter rows, whatever the size of the tables. For metrics: it does not wait
// for the log's sync, so it may count commits a crash would still undo.
Result<SagaHistoryStats> SagaHistory(Datastore& ds);

}  // namespace fp::db
