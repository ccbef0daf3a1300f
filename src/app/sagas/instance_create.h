#pragma once

// Saga "instance_create": creates an instance in state `creating` with its primary NIC, its
// SNAT block (IPv4 stacks only), then attaches each requested external IP in request order, one
// node each (§4.4), and marks it stopped. The instance is `creating` throughout, which keeps API
// attach and detach away, so each attach completes at once; NAT is programmed when it starts.
// Any failure unwinds to nothing: no instance, no address held.
//
// Nodes: record -> snat -> external_ip_0 ... external_ip_<n-1> -> finish.

#include <string>
#include <vector>

#include "app/sagas/json.h"
#include "app/sagas/records.h"
#include "saga/saga.h"

namespace fp::app {

inline constexpr char kInstanceCreateSaga[] = "instance_create";

// An external IP the create attaches: a floating IP resolved before the saga, or an ephemeral
// one allocated under `ip_id` from `pool` or the silo's default pool (of `ip_version`).
struct InstanceCreateExternalIp {
  model::IpKind type = model::IpKind::kFloating;  // kFloating or kEphemeral
  Uuid ip_id;
  std::optional<NameOrId> pool;
  std::optional<IpVersion> ip_version;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(InstanceCreateExternalIp, type, ip_id, pool,
                                                ip_version)

// Every identifier the saga creates is chosen before it starts, so a re-run reuses it.
struct InstanceCreateSagaParams {
  Uuid instance_id;
  Uuid nic_id;
  Uuid snat_id;
  Uuid project_id;
  Uuid silo_id;
  std::string name;
  std::string description;
  std::string hostname;
  int64_t ncpus = 1;
  int64_t memory = 0;
  model::NicKind nic = model::NicKind::kDualStack;
  bool start = true;  // run instance_start after this saga (the operation does, not the saga)
  std::vector<InstanceCreateExternalIp> external_ips;
  // An outbound SNAT block for an IPv4 interface (false: none; logs from before it was a
  // choice read as true).
  bool snat = true;
  // With `snat`, the id of a dual-stack instance's IPv6 SNAT block, taken when the silo has a
  // default IPv6 pool (absent in logs from before IPv6 SNAT: none).
  std::optional<Uuid> snat6_id;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(InstanceCreateSagaParams, instance_id, nic_id,
                                                snat_id, project_id, silo_id, name, description,
                                                hostname, ncpus, memory, nic, start, external_ips,
                                                snat, snat6_id)

// The output of the last node, `finish`: the created row, which a replay of a create that did
// not start the instance answers with (Instances::InstanceOfSaga). Absent in the outputs of
// the other instance sagas' last nodes.
struct InstanceCreated {
  std::optional<model::Instance> instance;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(InstanceCreated, instance)

// The nodes, in execution order, for `external_ips` requested IPs.
std::vector<saga::Node> InstanceCreateNodes(size_t external_ips);
saga::SagaDag InstanceCreateSaga(const InstanceCreateSagaParams& params);

void RegisterInstanceCreateActions(saga::ActionRegistry& registry);

}  // namespace fp::app
