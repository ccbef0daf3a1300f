#include "saga/execution.h"

#include <fmt/format.h>
#include <signal.h>

#include <cstdio>

namespace fp::saga {

SagaExecutor::Execution::Execution(SagaExecutor& exec, SagaLog log, SagaDag dag,
                                   std::optional<SagaRow> create_row, const SagaOrigin* origin,
                                   const CreateCheck* check)
    : exec_(exec),
      store_(exec.store_),
      id_(log.saga.id),
      // Write as this executor, in the generation the log had when loaded: if another
      // executor owns the saga, or adopted it since, every write is refused (fencing).
      owner_{exec.sec_, log.saga.owner.generation},
      state_(log.saga.state),
      result_(log.saga.result),
      dag_(std::move(dag)),
      events_(std::move(log.events)),
      faults_(exec.FaultsFor(dag_.name)),
      create_row_(std::move(create_row)),
      create_with_first_node_(create_row_.has_value()),
      origin_(origin),
      create_check_(check),
      origin_text_(log.saga.origin) {}

Result<SagaOutcome> SagaExecutor::Execution::Drive() {
  FP_CHECK_OK(Replay());
  if (state_ == SagaState::kDone || state_ == SagaState::kUnwound || state_ == SagaState::kStuck) {
    return Rested();
  }
  bool unwinding = state_ == SagaState::kUnwinding;
  for (NodeStatus s : status_) {
    if (s == NodeStatus::kFailed || s == NodeStatus::kUndoStarted ||
        s == NodeStatus::kUndoFinished || s == NodeStatus::kUndoFailed) {
      unwinding = true;
    }
  }
  if (!unwinding) {
    for (size_t i = 0; i < dag_.nodes.size(); ++i) {
      if (status_[i] == NodeStatus::kSucceeded) continue;
      FP_CHECK_OK(NotQuiesced());
      bool ok = FP_TRY(RunNode(static_cast<int>(i)));
      if (!ok) {
        if (never_written_) return Rested();
        unwinding = true;
        break;
      }
    }
    if (!unwinding) {
      if (state_ != SagaState::kDone) {
        // Only reached for a saga with no nodes: the last node's commit sets done otherwise.
        FP_CHECK_OK(Record(std::nullopt, SagaState::kDone, LastOutput().dump()));
      }
      return Rested();
    }
  }
  for (int i = static_cast<int>(dag_.nodes.size()) - 1; i >= 0; --i) {
    NodeStatus s = status_[static_cast<size_t>(i)];
    if (s == NodeStatus::kUndoFailed) return Stuck(i, Error::Internal("undo failed earlier"));
    if (s != NodeStatus::kSucceeded && s != NodeStatus::kUndoStarted) continue;
    FP_CHECK_OK(NotQuiesced());
    auto undone = FP_TRY(UndoNode(i));
    if (!undone) return Rested();  // stuck
  }
  FP_CHECK_OK(Record(std::nullopt, SagaState::kUnwound, FailureJson().dump()));
  return Rested();
}

Status SagaExecutor::Execution::Replay() {
  ReplayedLog log = FP_TRY(saga::Replay(id_, dag_, std::move(events_)));
  status_ = std::move(log.status);
  outputs_ = std::move(log.outputs);
  failed_node_ = log.failed_node;
  failure_ = std::move(log.failure);
  return Ok();
}

Status SagaExecutor::Execution::NotQuiesced() const {
  if (!exec_.quiesced_.load()) return Ok();
  return Fail(Error::Unavailable(
      fmt::format("the server is stopping; saga {} resumes when it starts again", id_.ToString())));
}

ActionContext SagaExecutor::Execution::Context(int i) const {
  return ActionContext(id_, dag_.params, outputs_, dag_.nodes[static_cast<size_t>(i)].name,
                       origin_text_ ? std::string_view(*origin_text_) : std::string_view(),
                       origin_ != nullptr ? origin_->request_id() : std::string_view());
}

Result<const Action*> SagaExecutor::Execution::ActionOf(int i) const {
  const std::string& name = dag_.nodes[static_cast<size_t>(i)].action;
  const Action* a = exec_.registry_.Find(name);
  if (!a) {
    return Fail(Error::Internal(
        fmt::format("saga {}: action \"{}\" is not registered", id_.ToString(), name)));
  }
  return a;
}

Json SagaExecutor::Execution::LastOutput() const {
  if (dag_.nodes.empty()) return Json();
  auto it = outputs_.find(dag_.nodes.back().name);
  return it == outputs_.end() ? Json() : it->second;
}

Json SagaExecutor::Execution::FailureJson() const {
  Json j = failure_.is_object() ? failure_ : ErrorToJson(Error::Internal("unknown failure"));
  if (failed_node_) j["node"] = *failed_node_;
  return j;
}

Status SagaExecutor::Execution::Record(std::optional<SagaEvent> event,
                                       std::optional<SagaState> state,
                                       std::optional<std::string> result) {
  // The unlogged nodes' events waiting for a commit go in this one, before the new event.
  SagaRecord record{.events = pending_, .new_state = state, .result = std::move(result)};
  if (event) record.events.push_back(std::move(*event));
  FP_CHECK_OK(
      store_.Write([&](StoreTx& tx) { return store_.RecordAllIn(tx, id_, owner_, record); }));
  pending_.clear();
  if (state) {
    state_ = *state;
    result_ = std::move(record.result);
  }
  return Ok();
}

std::optional<Error> SagaExecutor::Execution::InjectedFailure(int i) const {
  if (faults_ && faults_->fail_node == i) {
    return Error::Internal(fmt::format("injected failure at node {} ({})", i,
                                       dag_.nodes[static_cast<size_t>(i)].name));
  }
  return std::nullopt;
}

Result<Json> SagaExecutor::Execution::RunWithFaults(
    int i, const std::function<Result<Json>()>& run) const {
  if (auto injected = InjectedFailure(i)) return Fail(*injected);
  Result<Json> out = Fail(Error::Internal("not run"));
  for (int k = 0; k < Repeats(); ++k) out = run();
  if (out) ExitIf(&FaultPlan::exit_in_node, i);
  if (exit_after_tx_) return Fail(Error::Internal("the process stops here (a test fault)"));
  if (out && faults_ && faults_->fail_node_after_effect == i) {
    return Fail(Error::Internal(fmt::format("injected failure after the effect of node {} ({})", i,
                                            dag_.nodes[static_cast<size_t>(i)].name)));
  }
  return out;
}

void SagaExecutor::Execution::ExitIf(const std::optional<int> FaultPlan::*point, int i) const {
  if (faults_ && (*faults_).*point == i) {
    if (faults_->exit && in_tx_) {
      exit_after_tx_ = true;
      return;
    }
    if (faults_->exit) faults_->exit();
    std::fflush(nullptr);
    raise(SIGKILL);
  }
}

void SagaExecutor::Execution::ExitAfterTx() const {
  if (!exit_after_tx_) return;
  faults_->exit();
  std::fflush(nullptr);
  raise(SIGKILL);
}

void SagaExecutor::Execution::AfterNodeLogged(int i) const {
  ExitIf(&FaultPlan::exit_after_node, i);
  if (faults_ && faults_->call_after_node == i && faults_->after_node_call) {
    faults_->after_node_call();
  }
}

Result<bool> SagaExecutor::Execution::RunNode(int i) {
  const Action* action = FP_TRY(ActionOf(i));
  ActionContext ctx = Context(i);
  if (action->run_in_tx) return RunNodeInTx(i, *action, ctx);
  const std::string& name = dag_.nodes[static_cast<size_t>(i)].name;
  Result<Json> out = Fail(Error::Internal("not run"));
  if (action->unlogged) {
    out = RunWithFaults(i, [&] { return action->run(ctx); });
    if (out) {
      outputs_[name] = *out;
      status_[static_cast<size_t>(i)] = NodeStatus::kSucceeded;
      pending_.push_back(SagaEvent{i, SagaEventType::kSucceeded, out->dump()});
      if (IsLast(i)) {
        FP_CHECK_OK(Record(std::nullopt, SagaState::kDone, out->dump()));
      }
      AfterNodeLogged(i);
      return true;
    }
  } else {
    if (status_[static_cast<size_t>(i)] == NodeStatus::kNeverStarted) {
      FP_CHECK_OK(
          Record(SagaEvent{i, SagaEventType::kStarted, std::nullopt}, std::nullopt, std::nullopt));
      status_[static_cast<size_t>(i)] = NodeStatus::kStarted;
    }
    out = RunWithFaults(i, [&] { return action->run(ctx); });
    if (out) {
      // Dumped once; the event gets a copy first (arguments are evaluated in no set order).
      SagaEvent succeeded{i, SagaEventType::kSucceeded, out->dump()};
      std::optional<std::string> result;
      if (IsLast(i)) result = succeeded.data;
      FP_CHECK_OK(Record(std::move(succeeded),
                         IsLast(i) ? std::optional<SagaState>(SagaState::kDone) : std::nullopt,
                         std::move(result)));
      // The last node's output is the saga's (nothing runs after it to look it up).
      if (IsLast(i)) {
        done_output_ = std::move(*out);
      } else {
        outputs_[name] = std::move(*out);
      }
      status_[static_cast<size_t>(i)] = NodeStatus::kSucceeded;
      AfterNodeLogged(i);
      return true;
    }
  }
  return NodeFailed(i, out.error());
}

Result<bool> SagaExecutor::Execution::RunNodeInTx(int i, const Action& action,
                                                  const ActionContext& ctx) {
  // The effect and its "succeeded" event (and "done" for the last node) commit together.
  bool id_taken = false;
  Json output;
  std::string output_text;
  in_tx_ = true;
  Status committed = store_.Write([&](StoreTx& tx) -> Status {
    id_taken = false;  // the store may run this body again (a retried transaction)
    refused_.reset();
    if (action.joins_write_queue) tx.JoinWriteQueue();
    if (create_with_first_node_ && i == 0) {
      if (create_check_ != nullptr) {
        Status checked = (*create_check_)(tx, dag_.params);
        if (!checked) {
          refused_ = checked.error();
          return checked;
        }
        create_row_->dag = dag_.ToText();  // with the params as the check left them
        if (!counted_start_) {
          // Counted once it passed (the counter never goes back): a refused saga never started.
          exec_.CountStarted(dag_.name);
          counted_start_ = true;
        }
      }
      if (!FP_TRY(store_.CreateIn(tx, *create_row_, origin_))) {
        id_taken = true;
        return Fail(SagaExistsError(id_));
      }
    }
    Result<Json> r = RunWithFaults(i, [&] { return action.run_in_tx(tx, ctx); });
    if (!r) return Fail(r.error());
    output_text = r->dump();  // once: the event's data and, for the last node, the result
    // The unlogged nodes' events before this one's, all in one record (one statement).
    SagaRecord record{
        .events = pending_,
        .new_state = IsLast(i) ? std::optional<SagaState>(SagaState::kDone) : std::nullopt,
        .result = IsLast(i) ? std::optional<std::string>(output_text) : std::nullopt};
    record.events.push_back(SagaEvent{i, SagaEventType::kSucceeded, output_text});
    FP_CHECK_OK(store_.RecordAllIn(tx, id_, owner_, record));
    output = std::move(*r);
    return Ok();
  });
  in_tx_ = false;
  ExitAfterTx();
  if (committed) {
    pending_.clear();
    create_with_first_node_ = false;
    status_[static_cast<size_t>(i)] = NodeStatus::kSucceeded;
    // The last node's output is the saga's (nothing runs after it to look it up).
    if (IsLast(i)) {
      state_ = SagaState::kDone;
      result_ = std::move(output_text);
      done_output_ = std::move(output);
    } else {
      outputs_[dag_.nodes[static_cast<size_t>(i)].name] = std::move(output);
    }
    AfterNodeLogged(i);
    return true;
  }
  // A refusal is the check's error as the store returned it. Any other outcome (the batch's
  // COMMIT failed after the check, a retried transaction ran out of time) is the store's, as
  // for any first node: what the check read may not have been kept.
  if (refused_ && (committed || committed.error().kind() != refused_->kind() ||
                   committed.error().message() != refused_->message())) {
    refused_.reset();
    if (!counted_start_) {
      exec_.CountStarted(dag_.name);  // its outcome is counted: so is its start
      counted_start_ = true;
    }
  }
  if (refused_) return Fail(*refused_);
  // Another saga's log: touch nothing. (The datastore's store finds it at a later statement.)
  if (id_taken || IsSagaExists(committed.error())) return Fail(committed.error());
  if (create_with_first_node_) {
    // The saga row was rolled back with the failed first node: nothing happened, so there
    // is nothing to undo and no history worth keeping. A refused operation (a name in use,
    // an address held elsewhere) writes no saga at all.
    failed_node_ = i;
    failure_ = ErrorToJson(committed.error());
    state_ = SagaState::kUnwound;
    result_ = FailureJson().dump();
    never_written_ = true;
    return false;
  }
  return NodeFailed(i, committed.error());
}

Result<bool> SagaExecutor::Execution::NodeFailed(int i, const Error& error) {
  // The action failed and, by the rule for actions (saga/dag.h), left no effect: record it and
  // start unwinding. The node itself is never undone.
  if (IsLostSaga(error)) return Fail(error);  // fenced: another executor owns the saga now
  failed_node_ = i;
  failure_ = ErrorToJson(error);
  FP_CHECK_OK(Record(SagaEvent{i, SagaEventType::kFailed, failure_.dump()}, SagaState::kUnwinding,
                     std::nullopt));
  status_[static_cast<size_t>(i)] = NodeStatus::kFailed;
  return false;
}

Result<bool> SagaExecutor::Execution::UndoNode(int i) {
  const Action* action = FP_TRY(ActionOf(i));
  ActionContext ctx = Context(i);
  int runs = faults_ && faults_->repeat_undo_node == i ? 2 : 1;
  bool inject_fail = faults_ && faults_->fail_undo_node == i;
  if (!action->undo && !action->undo_in_tx) {
    FP_CHECK_OK(Record(SagaEvent{i, SagaEventType::kUndoFinished, std::nullopt}, std::nullopt,
                       std::nullopt));
    status_[static_cast<size_t>(i)] = NodeStatus::kUndoFinished;
    ExitIf(&FaultPlan::exit_after_undo_node, i);
    return true;
  }
  Status undone = Ok();
  if (action->undo_in_tx && !inject_fail) {
    in_tx_ = true;
    Status committed = store_.Write([&](StoreTx& tx) -> Status {
      for (int k = 0; k < runs; ++k) FP_CHECK_OK(action->undo_in_tx(tx, ctx));
      ExitIf(&FaultPlan::exit_in_undo_node, i);
      if (exit_after_tx_) return Fail(Error::Internal("the process stops here (a test fault)"));
      return store_.RecordIn(tx, id_, owner_,
                             SagaEvent{i, SagaEventType::kUndoFinished, std::nullopt}, std::nullopt,
                             std::nullopt);
    });
    in_tx_ = false;
    ExitAfterTx();
    if (committed) {
      status_[static_cast<size_t>(i)] = NodeStatus::kUndoFinished;
      ExitIf(&FaultPlan::exit_after_undo_node, i);
      return true;
    }
    // Fenced: the undo's change rolled back with the refused event; the new owner undoes it.
    if (IsLostSaga(committed.error())) return Fail(committed.error());
    undone = Fail(committed.error());
  } else {
    if (status_[static_cast<size_t>(i)] == NodeStatus::kSucceeded) {
      FP_CHECK_OK(Record(SagaEvent{i, SagaEventType::kUndoStarted, std::nullopt}, std::nullopt,
                         std::nullopt));
      status_[static_cast<size_t>(i)] = NodeStatus::kUndoStarted;
    }
    if (inject_fail) {
      undone = Fail(Error::Internal(fmt::format("injected undo failure at node {}", i)));
    } else {
      for (int k = 0; k < runs && undone; ++k) undone = action->undo(ctx);
    }
    if (undone) {
      ExitIf(&FaultPlan::exit_in_undo_node, i);
      FP_CHECK_OK(Record(SagaEvent{i, SagaEventType::kUndoFinished, std::nullopt}, std::nullopt,
                         std::nullopt));
      status_[static_cast<size_t>(i)] = NodeStatus::kUndoFinished;
      ExitIf(&FaultPlan::exit_after_undo_node, i);
      return true;
    }
  }
  FP_TRY(Stuck(i, undone.error()));
  return false;
}

Result<SagaOutcome> SagaExecutor::Execution::Stuck(int i, const Error& e) {
  Json j = ErrorToJson(e);
  j["node"] = i;
  if (status_[static_cast<size_t>(i)] != NodeStatus::kUndoFailed) {
    FP_CHECK_OK(
        Record(SagaEvent{i, SagaEventType::kUndoFailed, j.dump()}, SagaState::kStuck, j.dump()));
    status_[static_cast<size_t>(i)] = NodeStatus::kUndoFailed;
  } else if (state_ != SagaState::kStuck) {
    FP_CHECK_OK(Record(std::nullopt, SagaState::kStuck, j.dump()));
  }
  return Rested();
}

SagaOutcome SagaExecutor::Execution::Rested() {
  SagaOutcome out;
  if (state_ == SagaState::kDone && done_output_) {
    // Finished in this run: its result is the output at hand, not its text parsed again.
    out.kind = SagaResultKind::kDone;
    out.output = std::move(*done_output_);
    done_output_.reset();
    return out;
  }
  Json result = result_ ? Json::parse(*result_, nullptr, false) : Json();
  switch (state_) {
    case SagaState::kDone:
      out.kind = SagaResultKind::kDone;
      out.output = result_ ? result : LastOutput();
      break;
    case SagaState::kStuck:
      out.kind = SagaResultKind::kStuck;
      out.error = ErrorFromJson(result);
      if (result.contains("node")) out.failed_node = result["node"].get<int>();
      break;
    default:
      out.kind = SagaResultKind::kUnwound;
      out.error = ErrorFromJson(result.is_object() ? result : FailureJson());
      if (result.is_object() && result.contains("node")) {
        out.failed_node = result["node"].get<int>();
      } else {
        out.failed_node = failed_node_;
      }
  }
  return out;
}

}  // namespace fp::saga
