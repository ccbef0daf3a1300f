#pragma once

// The operation each route serves, named as Oxide's OpenAPI document names it (its
// operationId, e.g. "floating_ip_attach"): what an audit entry records. floatplane's own
// extensions under /v1/system are named in the same style.

#include <optional>
#include <string_view>

namespace fp::api {

// The operation of `method` on the route `pattern` (the router's, e.g.
// "/v1/floating-ips/{floating_ip}/attach"); nullopt for a route this table does not know.
std::optional<std::string_view> OperationId(std::string_view method, std::string_view pattern);

}  // namespace fp::api
