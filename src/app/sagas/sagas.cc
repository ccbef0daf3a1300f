#include "app/sagas/sagas.h"

#include "app/sagas/instance_create.h"
#include "app/sagas/instance_delete.h"
#include "app/sagas/instance_migrate.h"
#include "app/sagas/instance_start.h"
#include "app/sagas/ip_attach.h"
#include "app/sagas/ip_detach.h"
#include "db/datastore.h"

namespace fp::app {

std::vector<std::string> SagaNames() {
  return {kInstanceCreateSaga, kInstanceStartSaga, kInstanceMigrateSaga,
          kInstanceDeleteSaga, kIpAttachSaga,      kIpDetachSaga};
}

void RegisterSagaActions(saga::ActionRegistry& registry, SagaDeps& deps) {
  RegisterInstanceCreateActions(registry);
  RegisterInstanceStartActions(registry, deps);
  RegisterInstanceMigrateActions(registry, deps);
  RegisterInstanceDeleteActions(registry);
  RegisterIpAttachActions(registry, deps);
  RegisterIpDetachActions(registry, deps);
}

}  // namespace fp::app
