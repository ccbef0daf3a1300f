#pragma once

// The sagas the control plane ran, as operators read them: a list by state, and one saga's
// story (who started it with which request, what it acted on, each node's outcome and time,
// and the error that decided its end, in words an operator can act on).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "app/actor.h"
#include "common/error.h"
#include "common/time.h"
#include "common/uuid.h"
#include "saga/dag.h"

namespace fp::db {
class Datastore;
}  // namespace fp::db

namespace fp::app {

// A saga as listed: where it rests (or runs), and the request that started it.
struct SagaSummary {
  Uuid id;
  std::string name;
  std::string state;  // "running", "unwinding", "done", "unwound", "stuck"
  Timestamp time_created = 0;
  std::optional<Timestamp> time_ended;    // at rest: when it came to rest
  std::optional<std::string> request_id;  // the request that started it, if one did
};

// One node of a saga, as it ran.
struct SagaNodeStory {
  int index = 0;
  std::string name;
  std::string action;
  // "pending" (not reached), "running", "succeeded", "failed", "undoing", "undone",
  // "undo_failed".
  std::string outcome;
  std::optional<Timestamp> time_started;
  std::optional<Timestamp> time_ended;
  std::optional<Error> error;  // failed, undo_failed
};

struct SagaStory {
  SagaSummary summary;
  saga::Json params;   // the saga's parameters, as it was started with them
  saga::Json origin;   // {request_id, operation_id, actor, audit_entry_id}, or null
  saga::Json targets;  // what it acts on, named: {instance, external_ip, ...}
  std::vector<SagaNodeStory> nodes;
  std::optional<Error> error;  // unwound, stuck: the error that decided it
  std::string explanation;     // one sentence: where it stands and why
};

// Thread-safe.
class SagaList {
 public:
  explicit SagaList(db::Datastore& ds) : ds_(ds) {}

  // Forbidden unless the actor may list sagas (a fleet admin). The API asks first, before it
  // parses the request's query, so that a refused actor learns nothing of its query's faults.
  Status MayList(const Actor& actor) const;
  // Sagas in `state` (any without; InvalidRequest naming the states for another), started by
  // request `request_id` (any without), newest first, after the saga `after`, at most
  // `limit`. Forbidden as MayList.
  Result<std::vector<SagaSummary>> List(const Actor& actor, const std::optional<std::string>& state,
                                        const std::optional<std::string>& request_id,
                                        const std::optional<Uuid>& after, int64_t limit);
  // One saga's story. NotFound if there is no such saga (never made, or pruned after the
  // history retention).
  Result<SagaStory> View(const Actor& actor, const Uuid& id);

 private:
  db::Datastore& ds_;
};

}  // namespace fp::app
