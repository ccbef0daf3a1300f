#pragma once

// The sagas as operators read them (GET /v1/system/sagas and /v1/system/sagas/{id}): a list
// by state, paged newest first, and one saga's whole story: who started it, each node's events
// with their times, and the error that decided its end.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "db/datastore.h"
#include "saga/store.h"

namespace fp::db {

struct SagaListed {
  Uuid id;
  std::string name;
  saga::SagaState state = saga::SagaState::kRunning;
  Timestamp time_created = 0;
  Timestamp time_modified = 0;
  std::optional<std::string> origin;  // JSON (saga::SagaRow::origin)
};
// Sagas in `state` (any without), started by the request `request_id` (any without: a scan,
// for an operator's question, not for a hot path), newest first (by id: saga ids are
// time-ordered), after the saga `after` (a page's last), at most `limit`.
struct SagaFilter {
  std::optional<saga::SagaState> state;
  std::optional<std::string> request_id;
};
Result<std::vector<SagaListed>> SagaListPage(Datastore& ds, const SagaFilter& filter,
                                             const std::optional<Uuid>& after, int64_t limit);

struct SagaEventAt {
  saga::SagaEvent event;
  Timestamp time = 0;
};
struct SagaExplained {
  SagaListed saga;
  std::string dag;                    // JSON: name, params, nodes
  std::optional<std::string> result;  // JSON: the output (done), the error (unwound, stuck)
  std::vector<SagaEventAt> events;    // by node, then in the order they were written
};
// NotFound if no such saga (never made, or pruned).
Result<SagaExplained> SagaExplain(Datastore& ds, const Uuid& id);

}  // namespace fp::db
