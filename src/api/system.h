#pragma once

// The endpoints served without a token: `GET /v1/ping` and `GET /metrics`.

#include <functional>
#include <optional>

#include "api/endpoint.h"
#include "api/metrics.h"

namespace fp::api {

// The answer to `req` if it is one of those endpoints (GET only; other methods go on to the
// router, which does not know the paths: 404), std::nullopt otherwise. `http_stats`, if set,
// adds the HTTP server's admission counters to /metrics.
// `http_metrics` and `more_metrics` (families of the parts the API does not see) are added to
// /metrics when set.
std::optional<HttpResponse> ServeSystem(const HttpRequest& req, const Services& services,
                                        const std::function<HttpServerStats()>& http_stats,
                                        const HttpMetrics* http_metrics = nullptr,
                                        const std::function<void(std::string&)>& more_metrics = {});

}  // namespace fp::api
