#pragma once

// Internal to the engine: one run of one saga from its log to rest (SagaExecutor::Run, Resume).
// Not thread-safe; one per call, on the caller's thread.

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "saga/replay.h"
#include "saga/saga.h"

namespace fp::saga {

class SagaExecutor::Execution {
 public:
  // `create_row`: set for a saga not yet in the store (see create_row_).
  // `origin`: what the saga's starter records with its creation (saga/store.h), given while
  // that starter drives it (its request id is then at hand: ActionContext::request_id).
  // `check`: the starter's CreateCheck, run first in the transaction that creates the saga.
  Execution(SagaExecutor& exec, SagaLog log, SagaDag dag,
            std::optional<SagaRow> create_row = std::nullopt, const SagaOrigin* origin = nullptr,
            const CreateCheck* check = nullptr);

  // Replays the log, then runs the saga forward, or unwinds it, to rest.
  Result<SagaOutcome> Drive();
  // The create check refused the saga: Drive returned its error, and nothing was written.
  bool refused_by_check() const { return refused_.has_value(); }

 private:
  // Rebuilds node statuses and outputs from the log (saga/replay.h).
  Status Replay();
  // Between nodes: an executor shutting down leaves the rest of the saga to the next start.
  Status NotQuiesced() const;
  ActionContext Context(int i) const;
  Result<const Action*> ActionOf(int i) const;
  bool IsLast(int i) const { return static_cast<size_t>(i) + 1 == dag_.nodes.size(); }
  Json LastOutput() const;
  Json FailureJson() const;

  // Writes an event and/or a state change in a transaction of its own, with the pending
  // events of unlogged nodes before it (one record: SagaStore::RecordAllIn).
  Status Record(std::optional<SagaEvent> event, std::optional<SagaState> state,
                std::optional<std::string> result);

  std::optional<Error> InjectedFailure(int i) const;
  int Repeats() const { return faults_ && faults_->repeat_every_action ? 2 : 1; }
  // Runs node i's action through the test faults: fail before it runs (fail_node), run it
  // twice (repeat_every_action), or fail after it applied its effect (fail_node_after_effect).
  Result<Json> RunWithFaults(int i, const std::function<Result<Json>()>& run) const;
  // Test faults: dies by SIGKILL, as a crash would, if `point` names node i (or calls the
  // plan's `exit`). Inside a transaction's body (in_tx_) with a plan's own `exit`, which a
  // throw could not leave through the engine's write lane, it only marks the exit (exit_after_tx_):
  // the body then fails, so that nothing of the transaction commits, and ExitAfterTx stops the
  // process once the store returned. To the database the two are the same.
  void ExitIf(const std::optional<int> FaultPlan::*point, int i) const;
  void ExitAfterTx() const;
  void AfterNodeLogged(int i) const;

  // Runs node i forward. Returns true if it succeeded, false if it failed (the saga is then
  // unwinding); an error only for engine failures.
  Result<bool> RunNode(int i);
  // RunNode for a run_in_tx action: its effect and its "succeeded" event commit together.
  Result<bool> RunNodeInTx(int i, const Action& action, const ActionContext& ctx);
  // After node i's action failed with `error`: records the failure and starts unwinding.
  Result<bool> NodeFailed(int i, const Error& error);
  // Undoes node i. Returns false if the undo failed (the saga is then stuck).
  Result<bool> UndoNode(int i);
  Result<SagaOutcome> Stuck(int i, const Error& e);
  // The outcome at rest. Hands over the output at hand (done_output_): a later call (the stuck
  // path calls it twice; done_output_ is set only when done) reads the recorded result instead.
  SagaOutcome Rested();

  SagaExecutor& exec_;
  SagaStore& store_;
  Uuid id_;
  SagaOwner owner_;
  SagaState state_;
  std::optional<std::string> result_;
  // The last node's output when it succeeded in this run (result_ is its text).
  std::optional<Json> done_output_;
  SagaDag dag_;
  std::vector<SagaEvent> events_;
  std::optional<FaultPlan> faults_;
  std::vector<NodeStatus> status_;
  std::map<std::string, Json> outputs_;
  std::vector<SagaEvent> pending_;  // "succeeded" of unlogged nodes, not yet written
  // For a new saga whose first node is a database action: the saga row, inserted in that
  // node's transaction (and never, if that node fails).
  std::optional<SagaRow> create_row_;
  bool create_with_first_node_ = false;
  const SagaOrigin* origin_ = nullptr;
  const CreateCheck* create_check_ = nullptr;
  std::optional<Error> refused_;  // the create check's error
  bool counted_start_ = false;    // SagaExecutor::CountStarted, once the create check passed
  // The saga row's origin (SagaRow::origin), which every ActionContext shows.
  std::optional<std::string> origin_text_;
  // The first node of a new saga failed: the saga was never written (see RunNode).
  bool never_written_ = false;
  // ExitIf's marks (see there): set and read on the thread that runs the transaction's body,
  // read after the store's Write returned.
  mutable bool in_tx_ = false;
  mutable bool exit_after_tx_ = false;
  std::optional<int> failed_node_;
  Json failure_;
};

}  // namespace fp::saga
