#pragma once

// The generic saga engine: a saga is a chain of named actions, each with an optional undo,
// built from parameters (saga/dag.h); its log is persisted in a SagaStore (saga/store.h, which
// src/db implements over the datastore); it survives crashes of the process running it. It
// knows nothing of IP addresses or instances, nor of the database behind the store.

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/error.h"
#include "common/mutex.h"
#include "common/random.h"
#include "common/uuid.h"
#include "saga/dag.h"
#include "saga/store.h"

namespace fp::saga {

enum class SagaResultKind { kDone, kUnwound, kStuck };

// Where a saga came to rest. `output` is the last node's output (kDone); `error` is the error
// that made it unwind (kUnwound) or the failed undo's error (kStuck).
struct SagaOutcome {
  SagaResultKind kind = SagaResultKind::kDone;
  Json output;
  std::optional<Error> error;
  std::optional<int> failed_node;  // the node whose action failed (kUnwound, kStuck)
};

// What the starter of a new saga checks in the transaction that would create it, before
// anything of the saga is written there (SagaExecutor::RunNew): a request's checks of the
// resources it names, read under the same write as the saga's creation instead of in a read
// transaction of their own. An error refuses the saga: nothing of it is written, and the
// starter gets the error itself. Gets the store's transaction (db::Tx for the datastore) and
// the saga's params (JSON), which it may complete from what it read (a detach's instance: the
// IP's holder); the saga is written with them. May run more than once (a store's retried
// transaction).
using CreateCheck = std::function<Status(StoreTx&, Json& params)>;

// Test-only fault injection. The executor consults it only when the server enables test
// faults explicitly; a production configuration never sets one.
struct FaultPlan {
  std::optional<std::string> saga_name;  // restrict to sagas of this name (empty: all)
  std::optional<int> fail_node;          // the action of this node fails (after no effect)
  // The action of this node runs, then the node fails as if the action had returned an error
  // after applying its effect. A database action's effect rolls back with its transaction; any
  // other effect stays, since a failed node is never undone (an action that can fail after an
  // effect must take it back itself).
  std::optional<int> fail_node_after_effect;
  bool repeat_every_action = false;     // every action runs twice; the second result counts
  std::optional<int> repeat_undo_node;  // this node's undo runs twice
  std::optional<int> fail_undo_node;    // this node's undo fails
  // Stop the process (SIGKILL) right after this node's "succeeded" event is durable.
  std::optional<int> exit_after_node;
  // Stop the process once this node's action has applied its effect, before its "succeeded"
  // event is written (a run_in_tx action: before its transaction commits). Recovery must run
  // the action again.
  std::optional<int> exit_in_node;
  // While unwinding: stop the process right after this node's "undo finished" event is durable.
  std::optional<int> exit_after_undo_node;
  // While unwinding: stop the process once this node's undo has applied its effect, before its
  // "undo finished" event is written (an undo_in_tx undo: before its transaction commits, as
  // its effect and event commit together). Recovery must run the undo again.
  std::optional<int> exit_in_undo_node;
  // Call `after_node_call` right after this node's "succeeded" event is durable: a test's
  // stand-in for a concurrent request that lands between two nodes, or after the last one.
  std::optional<int> call_after_node;
  std::function<void()> after_node_call;
  // What "stop the process" above does: SIGKILL when unset; the simulation (src/sim/) throws
  // instead, so that its server stops there and the rest of the process goes on. Must not
  // return. At a point inside a transaction (exit_in_node of a run_in_tx action,
  // exit_in_undo_node of an undo_in_tx undo) it is called once the transaction rolled back: a
  // throw cannot leave through the engine's write lane, and to the database a process that died
  // inside the transaction is the same.
  std::function<void()> exit;
};

// Runs sagas to rest and recovers unfinished ones. Thread-safe: sagas run on the calling
// thread, several at once.
class SagaExecutor {
 public:
  // `sec` names this executor (the server's id): it owns the sagas it creates.
  // `store`, `registry`, `clock` and `random` (new sagas' ids; recovery's backoff) must outlive
  // the executor.
  SagaExecutor(SagaStore& store, const ActionRegistry& registry, std::string sec,
               const Clock& clock, Random& random);

  // Creates the saga (unless one with this id exists, which makes this a resume: the caller's
  // idempotent retry) and runs it to rest. When the first node is a database action, the saga
  // row commits together with that node's effect (one durable commit for both), and if that
  // node fails the saga is never written: nothing happened, and a refused operation leaves no
  // history (the outcome is kUnwound with the node's error all the same). Errors are only
  // about the engine itself (the store unreachable past its retry deadline, a corrupt log, lost
  // ownership); an action's failure is a normal outcome (kUnwound).
  // `origin`, if given, records its own writes in the transaction that creates the saga.
  Result<SagaOutcome> Run(const Uuid& saga_id, const SagaDag& dag,
                          const SagaOrigin* origin = nullptr);
  // Run() under a new random id: no saga can exist under it, so there is nothing to look up
  // before starting (one read transaction fewer per operation). `check`, if given, runs in the
  // transaction that would create the saga, first (saga/store.h): its error is RunNew's, and
  // the saga is then neither written nor counted. Only for a saga whose first node is a
  // database action (Internal otherwise).
  Result<SagaOutcome> RunNew(const SagaDag& dag, const SagaOrigin* origin = nullptr,
                             const CreateCheck* check = nullptr);
  // Loads the saga's log and continues from where it stopped, writing under the generation
  // the log has. ServiceUnavailable if this executor runs the saga already (on another thread).
  Result<SagaOutcome> Resume(const Uuid& saga_id);
  // Resume for recovery: continues the saga only if this executor owns it in `generation` (see
  // Claim), else LostSagaError.
  Result<SagaOutcome> ResumeOwned(const Uuid& saga_id, int64_t generation);
  // Takes a saga this executor owns in `generation` over again under the next generation
  // (SagaStore::Claim), so that any other execution of it stops at its next write. Recovery
  // claims a saga before it resumes it. Returns the new generation, nullopt if the saga is no
  // longer this executor's in `generation` or at rest. Never for a saga IsRunning here.
  Result<std::optional<int64_t>> Claim(const Uuid& saga_id, int64_t generation);
  // Whether a call of this executor (Run, RunNew, Resume, ResumeOwned) is driving the saga now.
  bool IsRunning(const Uuid& saga_id) const;
  // Resumes every unfinished saga this executor owns, several at a time, and waits until each
  // is at rest (SagaRecovery does the same in the background); returns their outcomes by id.
  // A saga that cannot resume is marked stuck and reported so; the others still recover.
  // Errors: the store's, from listing the sagas.
  Result<std::vector<std::pair<Uuid, SagaOutcome>>> RecoverAll();

  // Why the saga's log cannot be resumed by this engine, whatever the store's state: a
  // newer engine wrote it, its DAG does not parse, or it names an action this binary does not
  // register. nullopt if it can be resumed. Errors: reading the log failed.
  Result<std::optional<Error>> WhyNotResumable(const Uuid& saga_id);
  // The unfinished (running or unwinding) sagas this executor owns, oldest first, with the
  // generation it owns each in; those it is running included.
  Result<std::vector<OwnedSaga>> ListUnfinished();
  // Marks a saga this executor owns in `generation` stuck, with `why` as its error, whatever
  // its log holds: for a saga that cannot be resumed (a corrupt log, an action not registered,
  // a newer engine). Returns false if the saga is at rest already or no longer this
  // executor's in `generation`.
  Result<bool> MarkStuck(const Uuid& saga_id, int64_t generation, const Error& why);
  // Sets the check every new saga (Run, RunNew) passes before anything is written: an error
  // refuses the saga with that error. The server's coordinator refuses new sagas while this
  // server's lease is not known to be live (saga/coordinator.h). Set before any saga runs.
  void SetStartGate(std::function<Status()> gate);
  // Sets what is called when a request's Run, RunNew or Resume returns an engine error (the
  // store failing past its deadline, a full disk) with its saga written and not at rest: that
  // saga is driven by nobody now, and `hook` is the server's way to take it up again at once
  // (the coordinator's recovery, with its backoff) instead of at its next periodic pass.
  // Called on the caller's thread after the saga is no longer running here; not for a saga
  // another executor took over, nor after Quiesce. Set before any saga runs.
  void SetLeftUnfinishedHook(std::function<void()> hook);
  const std::string& sec() const { return sec_; }
  const Clock& clock() const { return clock_; }
  // For shutdown, once no request can start a saga any more: from now on every saga this
  // executor drives stops before its next node or undo and returns ServiceUnavailable; its log
  // stays unfinished, and recovery at the next start resumes it. Irreversible; thread-safe.
  void Quiesce();
  bool quiesced() const { return quiesced_.load(); }

  // Test seam (see FaultPlan).
  void SetFaultPlanForTest(std::optional<FaultPlan> plan);

  // What this executor did since it was made, by saga name (for /metrics): sagas it created,
  // sagas it is driving now (new or resumed), and the outcomes of those it drove to rest.
  struct Counts {
    int64_t started = 0;
    int64_t in_flight = 0;
    int64_t done = 0;
    int64_t unwound = 0;
    int64_t stuck = 0;
  };
  std::map<std::string, Counts> CountsByName() const;

 private:
  class Execution;
  // Drives `run` of the saga `name`, counting it in flight and its outcome.
  Result<SagaOutcome> DriveCounted(Execution& run, const std::string& name);
  // Counts a saga of `name` started (a new one, from the moment it may be written).
  void CountStarted(const std::string& name) FP_EXCLUDES(counts_mu_);
  Result<SagaOutcome> Start(const Uuid& saga_id, const SagaDag& dag, bool may_exist,
                            const SagaOrigin* origin, const CreateCheck* check = nullptr);
  // Start's body, with the saga marked running; sets `written` once the saga may be in the
  // store.
  Result<SagaOutcome> StartRunning(const Uuid& saga_id, const SagaDag& dag, bool may_exist,
                                   const SagaOrigin* origin, const CreateCheck* check,
                                   bool& written);
  // Calls the left-unfinished hook if `error` left a saga that nobody drives.
  void LeftUnfinished(const Error& error);
  // Resume's body; the caller marked the saga running. `generation`: the one the caller owns
  // it in (nullopt: the log's).
  // `origin`: given by the request that created the saga and drives it now (its actions see
  // its request id at hand).
  Result<SagaOutcome> ResumeRunning(const Uuid& saga_id, std::optional<int64_t> generation,
                                    const SagaOrigin* origin = nullptr);
  // Marks the saga running here for the guard's lifetime; ServiceUnavailable if it runs here
  // already.
  class RunningGuard;
  Result<std::unique_ptr<RunningGuard>> MarkRunning(const Uuid& saga_id);
  std::optional<FaultPlan> FaultsFor(const std::string& saga_name) const;

  SagaStore& store_;
  const Clock& clock_;
  Random& random_;
  const ActionRegistry& registry_;
  std::string sec_;
  mutable Mutex faults_mu_;
  std::optional<FaultPlan> faults_ FP_GUARDED_BY(faults_mu_);
  std::atomic<bool> quiesced_{false};
  std::function<Status()> start_gate_;
  std::function<void()> left_unfinished_;
  mutable Mutex running_mu_;
  std::set<Uuid> running_ FP_GUARDED_BY(running_mu_);
  mutable Mutex counts_mu_;
  std::map<std::string, Counts> counts_ FP_GUARDED_BY(counts_mu_);
};

}  // namespace fp::saga
