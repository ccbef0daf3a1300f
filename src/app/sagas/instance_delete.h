#pragma once

// Saga "instance_delete": one node, so the delete commits atomically or not at all and there
// is nothing to unwind. Its transaction refuses an instance that has a VMM (the operation
// checked before, from a read), and releases the instance's addresses and NAT rows.
//
// Nodes: record.

#include <vector>

#include "app/sagas/json.h"
#include "saga/saga.h"

namespace fp::app {

inline constexpr char kInstanceDeleteSaga[] = "instance_delete";

struct InstanceDeleteSagaParams {
  Uuid instance_id;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(InstanceDeleteSagaParams, instance_id)

std::vector<saga::Node> InstanceDeleteNodes();
saga::SagaDag InstanceDeleteSaga(const InstanceDeleteSagaParams& params);

void RegisterInstanceDeleteActions(saga::ActionRegistry& registry);

}  // namespace fp::app
