#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "app/actor.h"
#include "common/error.h"
#include "common/uuid.h"

namespace fp::db {
class Datastore;
}  // namespace fp::db

namespace fp::app {

// A saga as operators see it: where it rests (or runs).
struct SagaSummary {
  Uuid id;
  std::string name;
  std::string state;  // "running", "unwinding", "done", "unwound", "stuck"
};

// Queries over the sagas the control plane ran, for operators and tests. Thread-safe.
class SagaList {
 public:
  explicit SagaList(db::Datastore& ds) : ds_(ds) {}

  // Forbidden unless the actor may list sagas (a fleet admin). The API asks first, before it
  // parses the request's query, so that a refused actor learns nothing of its query's faults.
  Status MayList(const Actor& actor) const;
  // The newest sagas first, at most `limit`. Forbidden as MayList; the datastore's errors
  // otherwise.
  Result<std::vector<SagaSummary>> List(const Actor& actor, int64_t limit);

 private:
  db::Datastore& ds_;
};

}  // namespace fp::app
