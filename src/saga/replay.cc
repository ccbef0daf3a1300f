#include "saga/replay.h"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

namespace fp::saga {

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

Result<ReplayedLog> Replay(const Uuid& saga_id, const SagaDag& dag, std::vector<SagaEvent> events) {
  ReplayedLog log;
  log.status.assign(dag.nodes.size(), NodeStatus::kNeverStarted);
  std::stable_sort(events.begin(), events.end(), [](const auto& a, const auto& b) {
    return std::tie(a.node_index, a.type) < std::tie(b.node_index, b.type);
  });
  for (const SagaEvent& e : events) {
    if (e.node_index < 0 || static_cast<size_t>(e.node_index) >= dag.nodes.size()) {
      return Fail(Error::Internal(
          fmt::format("saga {}: event for unknown node {}", saga_id.ToString(), e.node_index)));
    }
    auto& status = log.status[static_cast<size_t>(e.node_index)];
    auto next = Apply(status, e.type);
    if (!next) {
      return Fail(Error::Internal(fmt::format("saga {}: illegal event {} for node {}",
                                              saga_id.ToString(), ToString(e.type), e.node_index)));
    }
    status = *next;
    const std::string& name = dag.nodes[static_cast<size_t>(e.node_index)].name;
    if (e.type == SagaEventType::kSucceeded) {
      log.outputs[name] = e.data ? Json::parse(*e.data, nullptr, false) : Json();
    } else if (e.type == SagaEventType::kFailed) {
      log.failed_node = e.node_index;
      log.failure = e.data ? Json::parse(*e.data, nullptr, false) : Json();
    }
  }
  // A chain: a node may have events only if every node before it succeeded (or, while
  // unwinding, is being or has been undone).
  for (size_t i = 1; i < log.status.size(); ++i) {
    if (log.status[i] != NodeStatus::kNeverStarted &&
        log.status[i - 1] == NodeStatus::kNeverStarted) {
      return Fail(Error::Internal(
          fmt::format("saga {}: node {} ran before node {}", saga_id.ToString(), i, i - 1)));
    }
  }
  return log;
}

}  // namespace fp::saga
