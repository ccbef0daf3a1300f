#pragma once

// Rows as saga outputs record them, for replies rebuilt from a saga's log (an Idempotency-Key's
// replay answers with the row the saga's last node committed, not a later read). The keys are
// the columns' names; like every saga log format they never change (see app/sagas/json.h).
// Here rather than in model/ because this is the saga log's format, not the model's.

#include "app/sagas/json.h"
#include "model/external_ips.h"
#include "model/instances.h"

namespace fp::model {

// Enums as their model text (ToString). Text that is none of an enum's does not decode (a
// json exception naming it), for every one of them.
void to_json(nlohmann::json& j, const InstanceState& v);
void from_json(const nlohmann::json& j, InstanceState& v);
void to_json(nlohmann::json& j, const RunState& v);
void from_json(const nlohmann::json& j, RunState& v);
void to_json(nlohmann::json& j, const IpKind& v);
void from_json(const nlohmann::json& j, IpKind& v);
void to_json(nlohmann::json& j, const AttachState& v);
void from_json(const nlohmann::json& j, AttachState& v);
// "ipv4", "ipv6", "dual_stack", "none".
void to_json(nlohmann::json& j, const NicKind& v);
void from_json(const nlohmann::json& j, NicKind& v);

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Instance, id, project_id, name, description, hostname, ncpus,
                                   memory, state, run_state, sled_id, start_saga_id, migration_id,
                                   time_run_state_updated, time_created, time_modified)

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ExternalIp, id, name, description, pool_id, range_id, parent_id,
                                   kind, ip, first_port, last_port, project_id, state, time_created,
                                   time_modified)

}  // namespace fp::model
