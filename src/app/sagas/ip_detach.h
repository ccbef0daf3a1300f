#pragma once

// Saga "ip_detach": live detach of a floating or ephemeral IP, ip_attach's mirror. begin
// (database: the IP becomes `detaching`, held by this saga, and its NAT row is removed if the
// instance runs on a sled) -> dataplane (the switch is told and the sled's port loses the
// address; unlogged) -> complete (database: `detached`; an ephemeral IP is released). Two
// durable commits.
//
// Nodes: begin -> dataplane -> complete. Outputs: IpBegun (begin), IpDetachCompleted.

#include <optional>
#include <vector>

#include "app/sagas/ip_steps.h"

namespace fp::app {

inline constexpr char kIpDetachSaga[] = "ip_detach";

struct IpDetachSagaParams {
  model::IpKind kind = model::IpKind::kFloating;  // kFloating or kEphemeral
  Uuid ip_id;
  Uuid instance_id;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(IpDetachSagaParams, kind, ip_id, instance_id)

// The output of node `complete`: IpCompleted's fields and whether the saga detached the IP
// (false: it was not attached to the instance any more).
struct IpDetachCompleted {
  Uuid ip_id;
  bool did_detach = false;
  model::ExternalIp ip;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(IpDetachCompleted, ip_id, did_detach, ip)

std::vector<saga::Node> IpDetachNodes();
saga::SagaDag IpDetachSaga(const IpDetachSagaParams& params);

void RegisterIpDetachActions(saga::ActionRegistry& registry, SagaDeps& deps);

}  // namespace fp::app
