#pragma once

// Saga "instance_migrate": moves a running instance to another sled. It marks the migration
// (both ends then hold a VM, which the sled watcher and the reaper leave alone), starts the VM
// on the destination, places the instance there with its NAT rows, pushes NAT to the switch,
// and only then removes the source VM and clears the mark. A failure unwinds to the instance
// running where it was, NAT pointed back at the source.
//
// Nodes: begin -> destination -> finish -> switch -> source.

#include <vector>

#include "app/sagas/json.h"
#include "app/sagas/sagas.h"

namespace fp::app {

inline constexpr char kInstanceMigrateSaga[] = "instance_migrate";

struct InstanceMigrateSagaParams {
  Uuid instance_id;
  Uuid src_sled_id;
  Uuid dst_sled_id;
  Uuid migration_id;  // chosen before the saga: the mark its nodes set and clear
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(InstanceMigrateSagaParams, instance_id, src_sled_id, dst_sled_id,
                                   migration_id)

std::vector<saga::Node> InstanceMigrateNodes();
saga::SagaDag InstanceMigrateSaga(const InstanceMigrateSagaParams& params);

void RegisterInstanceMigrateActions(saga::ActionRegistry& registry, SagaDeps& deps);

}  // namespace fp::app
