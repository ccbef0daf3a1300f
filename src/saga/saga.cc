#include "saga/saga.h"

#include <fmt/format.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <set>

#include "db/saga_log.h"

namespace fp::saga {

namespace {

constexpr int64_t kEngineVersion = 1;

using db::SagaEventType;
using db::SagaState;

// A node's status, replayed from its events (Steno's node state machine).
enum class NodeStatus {
  kNeverStarted,
  kStarted,
  kSucceeded,
  kFailed,
  kUndoStarted,
  kUndoFinished,
  kUndoFailed
};

// The status after `event`, or std::nullopt if the event is illegal in `from`.
std::optional<NodeStatus> Apply(NodeStatus from, SagaEventType event) {
  switch (event) {
    case SagaEventType::kStarted:
      if (from == NodeStatus::kNeverStarted) return NodeStatus::kStarted;
      break;
    case SagaEventType::kSucceeded:
      // Database actions log no "started": their effect and "succeeded" commit together.
      if (from == NodeStatus::kStarted || from == NodeStatus::kNeverStarted) {
        return NodeStatus::kSucceeded;
      }
      break;
    case SagaEventType::kFailed:
      if (from == NodeStatus::kStarted || from == NodeStatus::kNeverStarted) {
        return NodeStatus::kFailed;
      }
      break;
    case SagaEventType::kUndoStarted:
      if (from == NodeStatus::kSucceeded) return NodeStatus::kUndoStarted;
      break;
    case SagaEventType::kUndoFinished:
    case SagaEventType::kUndoFailed:
      if (from == NodeStatus::kUndoStarted || from == NodeStatus::kSucceeded) {
        return event == SagaEventType::kUndoFinished ? NodeStatus::kUndoFinished
                                                     : NodeStatus::kUndoFailed;
      }
      break;
  }
  return std::nullopt;
}

std::string_view KindName(ErrorKind k) {
  switch (k) {
    case ErrorKind::kInvalidRequest:
      return "invalid_request";
    case ErrorKind::kInvalidValue:
      return "invalid_value";
    case ErrorKind::kObjectAlreadyExists:
      return "already_exists";
    case ErrorKind::kUnauthenticated:
      return "unauthenticated";
    case ErrorKind::kForbidden:
      return "forbidden";
    case ErrorKind::kNotFound:
      return "not_found";
    case ErrorKind::kUnprocessableEntity:
      return "unprocessable";
    case ErrorKind::kServiceUnavailable:
      return "unavailable";
    case ErrorKind::kInsufficientCapacity:
      return "insufficient_capacity";
    case ErrorKind::kInternal:
      return "internal";
  }
  return "internal";
}

}  // namespace

Json ErrorToJson(const Error& e) {
  return Json{{"kind", KindName(e.kind())},
              {"message", e.message()},
              {"retry_after", e.retry_after_seconds()}};
}

Error ErrorFromJson(const Json& j) {
  std::string kind = j.value("kind", "internal");
  std::string message = j.value("message", "unknown error");
  for (ErrorKind k :
       {ErrorKind::kInvalidRequest, ErrorKind::kInvalidValue, ErrorKind::kObjectAlreadyExists,
        ErrorKind::kUnauthenticated, ErrorKind::kForbidden, ErrorKind::kNotFound,
        ErrorKind::kUnprocessableEntity, ErrorKind::kServiceUnavailable,
        ErrorKind::kInsufficientCapacity, ErrorKind::kInternal}) {
    if (KindName(k) == kind) {
      if (k == ErrorKind::kServiceUnavailable) {
        return Error::Unavailable(message, j.value("retry_after", 1));
      }
      return Error(k, message);
    }
  }
  return Error::Internal(message);
}

Result<Json> ActionContext::Lookup(const std::string& node) const {
  auto it = outputs_.find(node);
  if (it == outputs_.end()) {
    return Fail(Error::Internal(fmt::format(
        "saga node \"{}\" looked up the output of \"{}\", which has not succeeded", node_, node)));
  }
  return it->second;
}

void ActionRegistry::Add(Action action) {
  if (!action.run == !action.run_in_tx || actions_.count(action.name) != 0 ||
      (action.undo && action.undo_in_tx)) {
    std::fprintf(stderr, "saga action \"%s\" is registered twice or malformed\n",
                 action.name.c_str());
    std::abort();
  }
  std::string name = action.name;
  actions_.emplace(std::move(name), std::move(action));
}

const Action* ActionRegistry::Find(const std::string& name) const {
  auto it = actions_.find(name);
  return it == actions_.end() ? nullptr : &it->second;
}

Json SagaDag::ToJson() const {
  Json nodes_json = Json::array();
  for (const Node& n : nodes) nodes_json.push_back(Json{{"name", n.name}, {"action", n.action}});
  return Json{{"name", name}, {"params", params}, {"nodes", nodes_json}};
}

Result<SagaDag> SagaDag::FromJson(const Json& j) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string() || !j.contains("nodes") ||
      !j["nodes"].is_array()) {
    return Fail(Error::Internal("corrupt saga DAG"));
  }
  SagaDag dag;
  dag.name = j["name"].get<std::string>();
  dag.params = j.value("params", Json::object());
  for (const Json& n : j["nodes"]) {
    if (!n.is_object() || !n.contains("name") || !n.contains("action") || !n["name"].is_string() ||
        !n["action"].is_string()) {
      return Fail(Error::Internal("corrupt saga DAG node"));
    }
    dag.nodes.push_back(Node{n["name"].get<std::string>(), n["action"].get<std::string>()});
  }
  return dag;
}

// One run of one saga from its log to rest.
class SagaExecutor::Execution {
 public:
  // `create_row`: set for a saga not yet in the datastore (see create_row_).
  Execution(SagaExecutor& exec, db::SagaLog log, SagaDag dag,
            std::optional<db::SagaRow> create_row = std::nullopt)
      : exec_(exec),
        ds_(exec.ds_),
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
        create_with_first_node_(create_row_.has_value()) {}

  Result<SagaOutcome> Drive() {
    FP_CHECK_OK(Replay());
    if (state_ == SagaState::kDone || state_ == SagaState::kUnwound ||
        state_ == SagaState::kStuck) {
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

 private:
  // Rebuilds node statuses and outputs from the log, rejecting illegal sequences.
  Status Replay() {
    status_.assign(dag_.nodes.size(), NodeStatus::kNeverStarted);
    // Apply events in state-machine order within each node (never by wall time).
    std::stable_sort(events_.begin(), events_.end(), [](const auto& a, const auto& b) {
      return std::tie(a.node_index, a.type) < std::tie(b.node_index, b.type);
    });
    for (const db::SagaEvent& e : events_) {
      if (e.node_index < 0 || static_cast<size_t>(e.node_index) >= dag_.nodes.size()) {
        return Fail(Error::Internal(
            fmt::format("saga {}: event for unknown node {}", id_.ToString(), e.node_index)));
      }
      auto& status = status_[static_cast<size_t>(e.node_index)];
      auto next = Apply(status, e.type);
      if (!next) {
        return Fail(
            Error::Internal(fmt::format("saga {}: illegal event {} for node {}", id_.ToString(),
                                        db::ToString(e.type), e.node_index)));
      }
      status = *next;
      const std::string& name = dag_.nodes[static_cast<size_t>(e.node_index)].name;
      if (e.type == SagaEventType::kSucceeded) {
        outputs_[name] = e.data ? Json::parse(*e.data, nullptr, false) : Json();
      } else if (e.type == SagaEventType::kFailed) {
        failed_node_ = e.node_index;
        failure_ = e.data ? Json::parse(*e.data, nullptr, false) : Json();
      }
    }
    // A chain: a node may have events only if every node before it succeeded (or, while
    // unwinding, is being or has been undone).
    for (size_t i = 1; i < status_.size(); ++i) {
      if (status_[i] != NodeStatus::kNeverStarted && status_[i - 1] == NodeStatus::kNeverStarted) {
        return Fail(Error::Internal(
            fmt::format("saga {}: node {} ran before node {}", id_.ToString(), i, i - 1)));
      }
    }
    return Ok();
  }

  // Between nodes: an executor shutting down leaves the rest of the saga to the next start.
  Status NotQuiesced() const {
    if (!exec_.quiesced_.load()) return Ok();
    return Fail(Error::Unavailable(fmt::format(
        "the server is stopping; saga {} resumes when it starts again", id_.ToString())));
  }

  ActionContext Context(int i) const {
    return ActionContext(id_, dag_.params, outputs_, dag_.nodes[static_cast<size_t>(i)].name);
  }

  Result<const Action*> ActionOf(int i) const {
    const std::string& name = dag_.nodes[static_cast<size_t>(i)].action;
    const Action* a = exec_.registry_.Find(name);
    if (!a) {
      return Fail(Error::Internal(
          fmt::format("saga {}: action \"{}\" is not registered", id_.ToString(), name)));
    }
    return a;
  }

  bool IsLast(int i) const { return static_cast<size_t>(i) + 1 == dag_.nodes.size(); }

  Json LastOutput() const {
    if (dag_.nodes.empty()) return Json();
    auto it = outputs_.find(dag_.nodes.back().name);
    return it == outputs_.end() ? Json() : it->second;
  }

  Json FailureJson() const {
    Json j = failure_.is_object() ? failure_ : ErrorToJson(Error::Internal("unknown failure"));
    if (failed_node_) j["node"] = *failed_node_;
    return j;
  }

  Status Record(std::optional<db::SagaEvent> event, std::optional<SagaState> state,
                std::optional<std::string> result) {
    FP_CHECK_OK(FlushPending());
    FP_CHECK_OK(db::SagaRecord(ds_, id_, owner_, event, state, result));
    if (state) {
      state_ = *state;
      result_ = result;
    }
    return Ok();
  }

  // Writes the "succeeded" events of unlogged nodes that no later commit carried yet.
  Status FlushPending() {
    if (pending_.empty()) return Ok();
    FP_TRY(ds_.Write<bool>([&](db::Tx& tx) -> Result<bool> {
      FP_CHECK_OK(RecordPendingIn(tx));
      return true;
    }));
    pending_.clear();
    return Ok();
  }

  Status RecordPendingIn(db::Tx& tx) {
    for (const auto& e : pending_) {
      FP_CHECK_OK(db::SagaRecordIn(tx, id_, owner_, e, std::nullopt, std::nullopt));
    }
    return Ok();
  }

  std::optional<Error> InjectedFailure(int i) const {
    if (faults_ && faults_->fail_node == i) {
      return Error::Internal(fmt::format("injected failure at node {} ({})", i,
                                         dag_.nodes[static_cast<size_t>(i)].name));
    }
    return std::nullopt;
  }

  int Repeats() const { return faults_ && faults_->repeat_every_action ? 2 : 1; }

  // Runs node i's action through the test faults: fail before it runs (fail_node), run it
  // twice (repeat_every_action), or fail after it applied its effect (fail_node_after_effect).
  Result<Json> RunWithFaults(int i, const std::function<Result<Json>()>& run) const {
    if (auto injected = InjectedFailure(i)) return Fail(*injected);
    Result<Json> out = Fail(Error::Internal("not run"));
    for (int k = 0; k < Repeats(); ++k) out = run();
    if (out) ExitIf(&FaultPlan::exit_in_node, i);
    if (out && faults_ && faults_->fail_node_after_effect == i) {
      return Fail(Error::Internal(fmt::format("injected failure after the effect of node {} ({})",
                                              i, dag_.nodes[static_cast<size_t>(i)].name)));
    }
    return out;
  }

  // Test faults: dies by SIGKILL, as a crash would, if `point` names node i.
  void ExitIf(const std::optional<int> FaultPlan::*point, int i) const {
    if (faults_ && (*faults_).*point == i) {
      std::fflush(nullptr);
      raise(SIGKILL);
    }
  }

  void AfterNodeLogged(int i) const {
    ExitIf(&FaultPlan::exit_after_node, i);
    if (faults_ && faults_->call_after_node == i && faults_->after_node_call) {
      faults_->after_node_call();
    }
  }

  // Runs node i forward. Returns true if it succeeded, false if it failed (the saga is then
  // unwinding); an error only for engine failures.
  Result<bool> RunNode(int i) {
    const Action* action = FP_TRY(ActionOf(i));
    ActionContext ctx = Context(i);
    const std::string& name = dag_.nodes[static_cast<size_t>(i)].name;
    Result<Json> out = Fail(Error::Internal("not run"));
    if (action->run_in_tx) {
      // The effect and its "succeeded" event (and "done" for the last node) commit together.
      bool id_taken = false;
      auto committed = ds_.Write<Json>([&](db::Tx& tx) -> Result<Json> {
        if (create_with_first_node_ && i == 0 && !FP_TRY(db::SagaCreateIn(tx, *create_row_))) {
          id_taken = true;
          return Fail(Error::Internal(
              fmt::format("saga {} already exists: it cannot be created again", id_.ToString())));
        }
        FP_CHECK_OK(RecordPendingIn(tx));
        Result<Json> r = RunWithFaults(i, [&] { return action->run_in_tx(tx, ctx); });
        if (!r) return r;
        FP_CHECK_OK(db::SagaRecordIn(
            tx, id_, owner_, db::SagaEvent{i, SagaEventType::kSucceeded, r->dump()},
            IsLast(i) ? std::optional<SagaState>(SagaState::kDone) : std::nullopt,
            IsLast(i) ? std::optional<std::string>(r->dump()) : std::nullopt));
        return r;
      });
      if (committed) {
        pending_.clear();
        create_with_first_node_ = false;
        outputs_[name] = *committed;
        status_[static_cast<size_t>(i)] = NodeStatus::kSucceeded;
        if (IsLast(i)) {
          state_ = SagaState::kDone;
          result_ = committed->dump();
        }
        AfterNodeLogged(i);
        return true;
      }
      if (id_taken) return Fail(committed.error());  // another saga's log: touch nothing
      out = committed;
      if (create_with_first_node_) {
        // The saga row was rolled back with the failed first node: nothing happened, so there
        // is nothing to undo and no history worth keeping. A refused operation (a name in use,
        // an address held elsewhere) writes no saga at all.
        failed_node_ = i;
        failure_ = ErrorToJson(out.error());
        state_ = SagaState::kUnwound;
        result_ = FailureJson().dump();
        never_written_ = true;
        return false;
      }
    } else if (action->unlogged) {
      out = RunWithFaults(i, [&] { return action->run(ctx); });
      if (out) {
        outputs_[name] = *out;
        status_[static_cast<size_t>(i)] = NodeStatus::kSucceeded;
        pending_.push_back(db::SagaEvent{i, SagaEventType::kSucceeded, out->dump()});
        if (IsLast(i)) {
          FP_CHECK_OK(Record(std::nullopt, SagaState::kDone, out->dump()));
        }
        AfterNodeLogged(i);
        return true;
      }
    } else {
      if (status_[static_cast<size_t>(i)] == NodeStatus::kNeverStarted) {
        FP_CHECK_OK(Record(db::SagaEvent{i, SagaEventType::kStarted, std::nullopt}, std::nullopt,
                           std::nullopt));
        status_[static_cast<size_t>(i)] = NodeStatus::kStarted;
      }
      out = RunWithFaults(i, [&] { return action->run(ctx); });
      if (out) {
        FP_CHECK_OK(Record(db::SagaEvent{i, SagaEventType::kSucceeded, out->dump()},
                           IsLast(i) ? std::optional<SagaState>(SagaState::kDone) : std::nullopt,
                           IsLast(i) ? std::optional<std::string>(out->dump()) : std::nullopt));
        outputs_[name] = *out;
        status_[static_cast<size_t>(i)] = NodeStatus::kSucceeded;
        AfterNodeLogged(i);
        return true;
      }
    }
    // The action failed and, by the rule for actions (saga.h), left no effect: record it and
    // start unwinding. The node itself is never undone.
    if (out.error().kind() == ErrorKind::kServiceUnavailable &&
        out.error().message().find("no longer owned") != std::string::npos) {
      return Fail(out.error());  // fenced: another executor owns the saga now
    }
    failed_node_ = i;
    failure_ = ErrorToJson(out.error());
    FP_CHECK_OK(Record(db::SagaEvent{i, SagaEventType::kFailed, failure_.dump()},
                       SagaState::kUnwinding, std::nullopt));
    status_[static_cast<size_t>(i)] = NodeStatus::kFailed;
    return false;
  }

  // Undoes node i. Returns false if the undo failed (the saga is then stuck).
  Result<bool> UndoNode(int i) {
    const Action* action = FP_TRY(ActionOf(i));
    ActionContext ctx = Context(i);
    int runs = faults_ && faults_->repeat_undo_node == i ? 2 : 1;
    bool inject_fail = faults_ && faults_->fail_undo_node == i;
    if (!action->undo && !action->undo_in_tx) {
      FP_CHECK_OK(Record(db::SagaEvent{i, SagaEventType::kUndoFinished, std::nullopt}, std::nullopt,
                         std::nullopt));
      status_[static_cast<size_t>(i)] = NodeStatus::kUndoFinished;
      ExitIf(&FaultPlan::exit_after_undo_node, i);
      return true;
    }
    Status undone = Ok();
    if (action->undo_in_tx && !inject_fail) {
      auto committed = ds_.Write<bool>([&](db::Tx& tx) -> Result<bool> {
        for (int k = 0; k < runs; ++k) FP_CHECK_OK(action->undo_in_tx(tx, ctx));
        ExitIf(&FaultPlan::exit_in_undo_node, i);
        FP_CHECK_OK(db::SagaRecordIn(tx, id_, owner_,
                                     db::SagaEvent{i, SagaEventType::kUndoFinished, std::nullopt},
                                     std::nullopt, std::nullopt));
        return true;
      });
      if (committed) {
        status_[static_cast<size_t>(i)] = NodeStatus::kUndoFinished;
        ExitIf(&FaultPlan::exit_after_undo_node, i);
        return true;
      }
      undone = Fail(committed.error());
    } else {
      if (status_[static_cast<size_t>(i)] == NodeStatus::kSucceeded) {
        FP_CHECK_OK(Record(db::SagaEvent{i, SagaEventType::kUndoStarted, std::nullopt},
                           std::nullopt, std::nullopt));
        status_[static_cast<size_t>(i)] = NodeStatus::kUndoStarted;
      }
      if (inject_fail) {
        undone = Fail(Error::Internal(fmt::format("injected undo failure at node {}", i)));
      } else {
        for (int k = 0; k < runs && undone; ++k) undone = action->undo(ctx);
      }
      if (undone) {
        ExitIf(&FaultPlan::exit_in_undo_node, i);
        FP_CHECK_OK(Record(db::SagaEvent{i, SagaEventType::kUndoFinished, std::nullopt},
                           std::nullopt, std::nullopt));
        status_[static_cast<size_t>(i)] = NodeStatus::kUndoFinished;
        ExitIf(&FaultPlan::exit_after_undo_node, i);
        return true;
      }
    }
    FP_TRY(Stuck(i, undone.error()));
    return false;
  }

  Result<SagaOutcome> Stuck(int i, const Error& e) {
    Json j = ErrorToJson(e);
    j["node"] = i;
    if (status_[static_cast<size_t>(i)] != NodeStatus::kUndoFailed) {
      FP_CHECK_OK(Record(db::SagaEvent{i, SagaEventType::kUndoFailed, j.dump()}, SagaState::kStuck,
                         j.dump()));
      status_[static_cast<size_t>(i)] = NodeStatus::kUndoFailed;
    } else if (state_ != SagaState::kStuck) {
      FP_CHECK_OK(Record(std::nullopt, SagaState::kStuck, j.dump()));
    }
    return Rested();
  }

  SagaOutcome Rested() const {
    SagaOutcome out;
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

  SagaExecutor& exec_;
  db::Datastore& ds_;
  Uuid id_;
  db::SagaOwner owner_;
  SagaState state_;
  std::optional<std::string> result_;
  SagaDag dag_;
  std::vector<db::SagaEvent> events_;
  std::optional<FaultPlan> faults_;
  std::vector<NodeStatus> status_;
  std::map<std::string, Json> outputs_;
  std::vector<db::SagaEvent> pending_;  // "succeeded" of unlogged nodes, not yet written
  // For a new saga whose first node is a database action: the saga row, inserted in that
  // node's transaction (and never, if that node fails).
  std::optional<db::SagaRow> create_row_;
  bool create_with_first_node_ = false;
  // The first node of a new saga failed: the saga was never written (see RunNode).
  bool never_written_ = false;
  std::optional<int> failed_node_;
  Json failure_;
};

SagaExecutor::SagaExecutor(db::Datastore& datastore, const ActionRegistry& registry,
                           std::string sec)
    : ds_(datastore), registry_(registry), sec_(std::move(sec)) {}

void SagaExecutor::SetFaultPlanForTest(std::optional<FaultPlan> plan) {
  std::lock_guard lock(faults_mu_);
  faults_ = std::move(plan);
}

std::optional<FaultPlan> SagaExecutor::FaultsFor(const std::string& saga_name) const {
  std::lock_guard lock(faults_mu_);
  if (!faults_) return std::nullopt;
  if (faults_->saga_name && *faults_->saga_name != saga_name) return std::nullopt;
  return faults_;
}

Result<SagaOutcome> SagaExecutor::Run(const Uuid& saga_id, const SagaDag& dag) {
  return Start(saga_id, dag, /*may_exist=*/true);
}

Result<SagaOutcome> SagaExecutor::RunNew(const SagaDag& dag) {
  // Time-ordered: the saga and saga_node_event tables, keyed by saga id, then grow at their
  // end, so the writes of a group-commit batch share pages (see Uuid::TimeOrdered).
  return Start(Uuid::TimeOrdered(), dag, /*may_exist=*/false);
}

Result<SagaOutcome> SagaExecutor::Start(const Uuid& saga_id, const SagaDag& dag, bool may_exist) {
  for (const Node& n : dag.nodes) {
    if (!registry_.Find(n.action)) {
      return Fail(Error::Internal(
          fmt::format("saga \"{}\": action \"{}\" is not registered", dag.name, n.action)));
    }
  }
  db::SagaRow row;
  row.id = saga_id;
  row.name = dag.name;
  row.dag = dag.ToJson().dump();
  row.owner = db::SagaOwner{sec_, 1};
  row.engine_version = kEngineVersion;
  const Action* first = dag.nodes.empty() ? nullptr : registry_.Find(dag.nodes.front().action);
  if (first && first->run_in_tx) {
    if (may_exist) {
      auto existing = db::SagaLoad(ds_, saga_id);
      if (existing) return Resume(saga_id);  // an idempotent retry of a saga already created
      if (existing.error().kind() != ErrorKind::kNotFound) return Fail(existing.error());
    }
    db::SagaLog log;
    log.saga = row;
    Execution run(*this, std::move(log), dag, row);
    return run.Drive();
  }
  FP_TRY(db::SagaCreate(ds_, row));
  return Resume(saga_id);
}

Result<SagaOutcome> SagaExecutor::Resume(const Uuid& saga_id) {
  db::SagaLog log = FP_TRY(db::SagaLoad(ds_, saga_id));
  if (log.saga.engine_version > kEngineVersion) {
    return Fail(Error::Internal(fmt::format("saga {} was written by a newer engine (version {})",
                                            saga_id.ToString(), log.saga.engine_version)));
  }
  Json dag_json = Json::parse(log.saga.dag, nullptr, false);
  SagaDag dag = FP_TRY(SagaDag::FromJson(dag_json));
  Execution run(*this, std::move(log), std::move(dag));
  return run.Drive();
}

Result<std::optional<Error>> SagaExecutor::WhyNotResumable(const Uuid& saga_id) {
  db::SagaLog log = FP_TRY(db::SagaLoad(ds_, saga_id));
  if (log.saga.engine_version > kEngineVersion) {
    return Error::Internal(fmt::format("saga {} was written by a newer engine (version {})",
                                       saga_id.ToString(), log.saga.engine_version));
  }
  auto dag = SagaDag::FromJson(Json::parse(log.saga.dag, nullptr, false));
  if (!dag) return dag.error();
  for (const Node& n : dag->nodes) {
    if (!registry_.Find(n.action)) {
      return Error::Internal(
          fmt::format("saga {}: action \"{}\" is not registered", saga_id.ToString(), n.action));
    }
  }
  return std::optional<Error>();
}

Result<std::vector<Uuid>> SagaExecutor::ListUnfinished() {
  return db::SagaListUnfinished(ds_, sec_);
}

Result<bool> SagaExecutor::MarkStuck(const Uuid& saga_id, const Error& why) {
  Json result = ErrorToJson(why);
  result["cannot_resume"] = true;
  return db::SagaMarkStuck(ds_, saga_id, sec_, result.dump());
}

void SagaExecutor::Quiesce() { quiesced_.store(true); }

}  // namespace fp::saga
