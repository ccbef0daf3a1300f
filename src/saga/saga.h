#pragma once

// The generic saga engine: a saga is a chain of named actions, each with an optional undo,
// built from parameters; its log is persisted in the datastore; it survives crashes of the
// process running it. It knows nothing of IP addresses or instances.
//
// Rules for action writers (Steno's, which this engine follows):
//  - An action may run more than once (after a crash, or under fault injection): it must be
//    idempotent, and anything non-deterministic a later node needs (a new id, an allocated
//    address) must be created in a node whose *output* records it.
//  - An action that fails must leave no side effect: a failed node is never undone.
//  - An undo may also run more than once. An undo that fails leaves the saga `stuck`.
//  - Nodes share values only through recorded outputs (ActionContext::Lookup).

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/uuid.h"
#include "db/datastore.h"

namespace fp::saga {

using Json = nlohmann::json;

// What an action sees: the saga's parameters and the outputs of the nodes before it.
class ActionContext {
 public:
  ActionContext(const Uuid& saga_id, const Json& params, const std::map<std::string, Json>& outputs,
                std::string node)
      : saga_id_(saga_id), params_(params), outputs_(outputs), node_(std::move(node)) {}

  const Uuid& saga_id() const { return saga_id_; }
  const Json& params() const { return params_; }
  const std::string& node() const { return node_; }
  // The recorded output of an earlier node; Internal if that node has not succeeded.
  Result<Json> Lookup(const std::string& node) const;

 private:
  const Uuid& saga_id_;
  const Json& params_;
  const std::map<std::string, Json>& outputs_;
  std::string node_;
};

// An action, registered under a unique name. Exactly one of `run` and `run_in_tx` is set:
//  - run: talks to something outside the database (an agent). Logged as started, run, then
//    logged as succeeded: two durable commits.
//  - run_in_tx: a pure database change. Its effect and its "succeeded" event commit in one
//    transaction: one durable commit, and the effect happens exactly once.
// Likewise at most one of `undo` and `undo_in_tx`.
struct Action {
  std::string name;
  std::function<Result<Json>(const ActionContext&)> run;
  std::function<Result<Json>(db::Tx&, const ActionContext&)> run_in_tx;
  std::function<Status(const ActionContext&)> undo;
  std::function<Status(db::Tx&, const ActionContext&)> undo_in_tx;
  // For `run` actions that are idempotent and leave no effect when they fail: no "started" is
  // logged, and "succeeded" is written in the same transaction as the next node's commit.
  // After a crash such a node simply runs again. Saves two durable commits.
  bool unlogged = false;
};

// Actions by name. Build it once at start-up; it is read-only afterwards (thread-safe reads).
class ActionRegistry {
 public:
  // Aborts on a duplicate name or an action with neither run function: a programming error.
  void Add(Action action);
  const Action* Find(const std::string& name) const;

 private:
  std::map<std::string, Action> actions_;
};

struct Node {
  std::string name;    // unique within the saga; the key for Lookup
  std::string action;  // a registered action's name
};

// A saga definition: its kind, parameters, and nodes in execution order (a chain: each node
// depends on every node before it, and undo runs in reverse).
struct SagaDag {
  std::string name;
  Json params;
  std::vector<Node> nodes;

  Json ToJson() const;
  static Result<SagaDag> FromJson(const Json& j);
};

enum class SagaResultKind { kDone, kUnwound, kStuck };

// Where a saga came to rest. `output` is the last node's output (kDone); `error` is the error
// that made it unwind (kUnwound) or the failed undo's error (kStuck).
struct SagaOutcome {
  SagaResultKind kind = SagaResultKind::kDone;
  Json output;
  std::optional<Error> error;
  std::optional<int> failed_node;  // the node whose action failed (kUnwound, kStuck)
};

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
};

// Runs sagas to rest and recovers unfinished ones. Thread-safe: sagas run on the calling
// thread, several at once.
class SagaExecutor {
 public:
  // `sec` names this executor (the server's id): it owns the sagas it creates.
  SagaExecutor(db::Datastore& datastore, const ActionRegistry& registry, std::string sec);

  // Creates the saga (unless one with this id exists, which makes this a resume: the caller's
  // idempotent retry) and runs it to rest. When the first node is a database action, the saga
  // row commits together with that node's effect (one durable commit for both), and if that
  // node fails the saga is never written: nothing happened, and a refused operation leaves no
  // history (the outcome is kUnwound with the node's error all the same). Errors are only
  // about the engine itself (the datastore unreachable past the retry deadline, a corrupt log, lost
  // ownership); an action's failure is a normal outcome (kUnwound).
  Result<SagaOutcome> Run(const Uuid& saga_id, const SagaDag& dag);
  // Run() under a new random id: no saga can exist under it, so there is nothing to look up
  // before starting (one read transaction fewer per operation).
  Result<SagaOutcome> RunNew(const SagaDag& dag);
  // Loads the saga's log and continues from where it stopped.
  Result<SagaOutcome> Resume(const Uuid& saga_id);
  // Resumes every unfinished saga this executor owns, several at a time, and waits until each
  // is at rest (SagaRecovery does the same in the background); returns their outcomes by id.
  // A saga that cannot resume is marked stuck and reported so; the others still recover.
  // Errors: the datastore's, from listing the sagas.
  Result<std::vector<std::pair<Uuid, SagaOutcome>>> RecoverAll();

  // Why the saga's log cannot be resumed by this engine, whatever the datastore's state: a
  // newer engine wrote it, its DAG does not parse, or it names an action this binary does not
  // register. nullopt if it can be resumed. Errors: reading the log failed.
  Result<std::optional<Error>> WhyNotResumable(const Uuid& saga_id);
  // The unfinished (running or unwinding) sagas this executor owns, oldest first.
  Result<std::vector<Uuid>> ListUnfinished();
  // Marks a saga this executor owns stuck, with `why` as its error, whatever its log holds: for
  // a saga that cannot be resumed (a corrupt log, an action not registered, a newer engine).
  // Returns false if the saga is at rest already or no longer this executor's.
  Result<bool> MarkStuck(const Uuid& saga_id, const Error& why);
  // For shutdown, once no request can start a saga any more: from now on every saga this
  // executor drives stops before its next node or undo and returns ServiceUnavailable; its log
  // stays unfinished, and recovery at the next start resumes it. Irreversible; thread-safe.
  void Quiesce();
  bool quiesced() const { return quiesced_.load(); }

  // Test seam (see FaultPlan).
  void SetFaultPlanForTest(std::optional<FaultPlan> plan);

 private:
  Result<SagaOutcome> Start(const Uuid& saga_id, const SagaDag& dag, bool may_exist);
  class Execution;
  std::optional<FaultPlan> FaultsFor(const std::string& saga_name) const;

  db::Datastore& ds_;
  const ActionRegistry& registry_;
  std::string sec_;
  mutable std::mutex faults_mu_;
  std::optional<FaultPlan> faults_;
  std::atomic<bool> quiesced_{false};
};

// Maps an Error to the JSON stored in the log, and back.
Json ErrorToJson(const Error& e);
Error ErrorFromJson(const Json& j);

}  // namespace fp::saga
