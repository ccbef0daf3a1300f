#pragma once

// Replay of a saga's log: each node's status and the recorded outputs, rebuilt from the events
// the log holds, whatever order they were written in. The log alone decides where a resumed
// saga continues (sagas-and-reliability.md A3).

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "saga/dag.h"
#include "saga/store.h"

namespace fp::saga {

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
std::optional<NodeStatus> Apply(NodeStatus from, SagaEventType event);

// What a saga's log says of its nodes.
struct ReplayedLog {
  std::vector<NodeStatus> status;       // one per node of the DAG
  std::map<std::string, Json> outputs;  // by node name, of the nodes that succeeded
  std::optional<int> failed_node;       // the node whose action failed, if one did
  Json failure;                         // that node's error (ErrorToJson)
};

// Applies `events` to the nodes of `dag`, in state-machine order within each node (never by
// wall time). Internal if the log is not one this engine could have written: an event for a
// node the DAG lacks, an illegal transition, or a node with events after one that never ran.
Result<ReplayedLog> Replay(const Uuid& saga_id, const SagaDag& dag, std::vector<SagaEvent> events);

}  // namespace fp::saga
