#include "api/operations.h"

#include <array>
#include <tuple>

namespace fp::api {

namespace {

struct Operation {
  std::string_view method;
  std::string_view pattern;
  std::string_view id;
};

constexpr std::array kOperations = {
    // Oxide's operations (../shared/api/nexus-external-ip-subset.json).
    Operation{"GET", "/v1/floating-ips", "floating_ip_list"},
    Operation{"POST", "/v1/floating-ips", "floating_ip_create"},
    Operation{"GET", "/v1/floating-ips/{floating_ip}", "floating_ip_view"},
    Operation{"PUT", "/v1/floating-ips/{floating_ip}", "floating_ip_update"},
    Operation{"DELETE", "/v1/floating-ips/{floating_ip}", "floating_ip_delete"},
    Operation{"POST", "/v1/floating-ips/{floating_ip}/attach", "floating_ip_attach"},
    Operation{"POST", "/v1/floating-ips/{floating_ip}/detach", "floating_ip_detach"},
    Operation{"POST", "/v1/system/floating-ips/{floating_ip}/transfer", "floating_ip_transfer"},
    Operation{"GET", "/v1/instances", "instance_list"},
    Operation{"POST", "/v1/instances", "instance_create"},
    Operation{"GET", "/v1/instances/{instance}", "instance_view"},
    Operation{"PUT", "/v1/instances/{instance}", "instance_update"},
    Operation{"DELETE", "/v1/instances/{instance}", "instance_delete"},
    Operation{"GET", "/v1/instances/{instance}/external-ips", "instance_external_ip_list"},
    Operation{"POST", "/v1/instances/{instance}/external-ips/ephemeral",
              "instance_ephemeral_ip_attach"},
    Operation{"DELETE", "/v1/instances/{instance}/external-ips/ephemeral",
              "instance_ephemeral_ip_detach"},
    Operation{"POST", "/v1/instances/{instance}/reboot", "instance_reboot"},
    Operation{"POST", "/v1/instances/{instance}/start", "instance_start"},
    Operation{"POST", "/v1/instances/{instance}/stop", "instance_stop"},
    Operation{"GET", "/v1/ip-pools", "ip_pool_list"},
    Operation{"GET", "/v1/ip-pools/{pool}", "ip_pool_view"},
    Operation{"GET", "/v1/me", "current_user_view"},
    Operation{"GET", "/v1/me/groups", "current_user_groups"},
    Operation{"GET", "/v1/groups", "group_list"},
    Operation{"GET", "/v1/users", "user_list"},
    Operation{"POST", "/v1/login/{silo_name}/local", "login_local"},
    Operation{"POST", "/v1/logout", "logout"},
    Operation{"POST", "/v1/system/identity-providers/local/users", "local_idp_user_create"},
    Operation{"DELETE", "/v1/system/identity-providers/local/users/{user_id}",
              "local_idp_user_delete"},
    Operation{"POST", "/v1/system/identity-providers/local/users/{user_id}/set-password",
              "local_idp_user_set_password"},
    Operation{"GET", "/v1/projects", "project_list"},
    Operation{"POST", "/v1/projects", "project_create"},
    Operation{"GET", "/v1/projects/{project}", "project_view"},
    Operation{"PUT", "/v1/projects/{project}", "project_update"},
    Operation{"DELETE", "/v1/projects/{project}", "project_delete"},
    Operation{"GET", "/v1/system/audit-log", "audit_log_list"},
    Operation{"GET", "/v1/system/hardware/sleds", "sled_list"},
    Operation{"GET", "/v1/system/hardware/sleds/{sled_id}", "sled_view"},
    Operation{"GET", "/v1/system/hardware/sleds/{sled_id}/instances", "sled_instance_list"},
    // An extension (Oxide expunges through its internal API).
    Operation{"POST", "/v1/system/hardware/sleds/{sled_id}/expunge", "sled_expunge"},
    Operation{"GET", "/v1/system/ip-pools", "system_ip_pool_list"},
    Operation{"POST", "/v1/system/ip-pools", "system_ip_pool_create"},
    Operation{"GET", "/v1/system/ip-pools/{pool}", "system_ip_pool_view"},
    Operation{"PUT", "/v1/system/ip-pools/{pool}", "system_ip_pool_update"},
    Operation{"DELETE", "/v1/system/ip-pools/{pool}", "system_ip_pool_delete"},
    Operation{"GET", "/v1/system/ip-pools/{pool}/ranges", "system_ip_pool_range_list"},
    Operation{"GET", "/v1/system/ip-pools/{pool}/addresses", "system_ip_pool_address_list"},
    Operation{"POST", "/v1/system/ip-pools/{pool}/ranges/add", "system_ip_pool_range_add"},
    Operation{"POST", "/v1/system/ip-pools/{pool}/ranges/remove", "system_ip_pool_range_remove"},
    Operation{"GET", "/v1/system/ip-pools/{pool}/silos", "system_ip_pool_silo_list"},
    Operation{"POST", "/v1/system/ip-pools/{pool}/silos", "system_ip_pool_silo_link"},
    Operation{"PUT", "/v1/system/ip-pools/{pool}/silos/{silo}", "system_ip_pool_silo_update"},
    Operation{"DELETE", "/v1/system/ip-pools/{pool}/silos/{silo}", "system_ip_pool_silo_unlink"},
    Operation{"GET", "/v1/system/ip-pools/{pool}/utilization", "system_ip_pool_utilization_view"},
    Operation{"GET", "/v1/system/silos", "silo_list"},
    Operation{"POST", "/v1/system/silos", "silo_create"},
    Operation{"GET", "/v1/system/silos/{silo}", "silo_view"},
    Operation{"DELETE", "/v1/system/silos/{silo}", "silo_delete"},
    Operation{"GET", "/v1/system/silos/{silo}/ip-pools", "silo_ip_pool_list"},
    Operation{"GET", "/v1/system/silos/{silo}/quotas", "silo_quotas_view"},
    Operation{"PUT", "/v1/system/silos/{silo}/quotas", "silo_quotas_update"},
    Operation{"GET", "/v1/system/silo-quotas", "system_quotas_list"},
    Operation{"GET", "/v1/utilization", "utilization_view"},
    Operation{"GET", "/v1/system/utilization/silos", "silo_utilization_list"},
    Operation{"GET", "/v1/system/utilization/silos/{silo}", "silo_utilization_view"},
    // floatplane's extensions.
    Operation{"POST", "/v1/login/token", "login_token"},
    Operation{"POST", "/v1/system/instances/{instance}/migrate", "instance_migrate"},
    Operation{"GET", "/v1/system/sagas", "system_saga_list"},
    Operation{"GET", "/v1/system/sagas/{saga_id}", "system_saga_view"},
    Operation{"GET", "/v1/system/projects/{project}/quotas", "project_quotas_view"},
    Operation{"PUT", "/v1/system/projects/{project}/quotas", "project_quotas_update"},
    Operation{"GET", "/v1/system/tokens", "system_token_list"},
    Operation{"POST", "/v1/system/tokens", "system_token_create"},
    Operation{"DELETE", "/v1/system/tokens/{id}", "system_token_delete"},
};

}  // namespace

std::optional<std::string_view> OperationId(std::string_view method, std::string_view pattern) {
  for (const Operation& op : kOperations) {
    if (op.method == method && op.pattern == pattern) return op.id;
  }
  return std::nullopt;
}

}  // namespace fp::api
