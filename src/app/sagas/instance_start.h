#pragma once

// Saga "instance_start": places a stopped instance on a sled (the sled is the node's output, so
// a re-run keeps it: placement is not deterministic), writes its NAT rows, starts its VM on the
// sled, then pushes NAT to the switch. A failure unwinds to the stopped instance with no VM and
// no NAT row.
//
// Nodes: place -> nat -> sled -> switch.

#include <vector>

#include "app/sagas/json.h"
#include "app/sagas/sagas.h"

namespace fp::app {

inline constexpr char kInstanceStartSaga[] = "instance_start";

struct InstanceStartSagaParams {
  Uuid instance_id;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(InstanceStartSagaParams, instance_id)

// The output of node `place`: the sled chosen.
struct InstancePlaced {
  Uuid sled_id;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(InstancePlaced, sled_id)

std::vector<saga::Node> InstanceStartNodes();
saga::SagaDag InstanceStartSaga(const InstanceStartSagaParams& params);

void RegisterInstanceStartActions(saga::ActionRegistry& registry, SagaDeps& deps);

}  // namespace fp::app
