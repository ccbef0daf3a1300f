#pragma once

// Request body shapes that several resources share.

#include "api/json_input.h"
#include "model/ip_pools.h"
#include "model/silos.h"

namespace fp::api {

// IdentityUpdate (PUT of projects, pools, floating IPs): optional name and description.
Result<model::IdentityUpdate> ParseIdentityUpdate(const Json& body);

// PoolSelector: {"type": "explicit", "pool": ...} or {"type": "auto", "ip_version": ...}.
Result<model::PoolSelector> ParsePoolSelector(const Fields& f);

}  // namespace fp::api
