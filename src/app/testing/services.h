#pragma once

// Test helper: the application services over a fresh datastore in a temporary directory, for
// tests of the layers above app/ (the API) that must not reach the datastore themselves.

#include "app/audit.h"
#include "app/floating_ips.h"
#include "app/idempotency.h"
#include "app/ip_pools.h"
#include "app/projects.h"
#include "app/saga_list.h"
#include "app/silos.h"
#include "app/store_stats.h"
#include "app/token_cache.h"
#include "app/tokens.h"
#include "app/users.h"
#include "db/testing/temp_datastore.h"

namespace fp::app::testing {

// Without sled agents: no instances service.
struct TempServices {
  db::testing::TempDatastore ds;
  TokenCache token_cache{*ds, ds->clock()};
  Tokens tokens{*ds, token_cache};
  Users users{*ds, SessionPolicy{}};
  Silos silos{*ds, token_cache};
  Projects projects{*ds};
  IpPools ip_pools{*ds};
  FloatingIps floating_ips{*ds};
  Idempotency idempotency{*ds};
  Audit audit{*ds};
  SagaList sagas{*ds};
  StoreStats store_stats{*ds};
};

}  // namespace fp::app::testing
