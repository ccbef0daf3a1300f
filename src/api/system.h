#pragma once

// The endpoints served without a token: `GET /v1/ping` and `GET /metrics`.

#include <functional>
#include <optional>

#include "api/endpoint.h"

namespace fp::api {

// The answer to `req` if it is one of those endpoints (GET only; other methods go on to the
// router, which does not know the paths: 404), std::nullopt otherwise. `http_stats`, if set,
// adds the HTTP server's admission counters to /metrics.
std::optional<HttpResponse> ServeSystem(const HttpRequest& req, const Services& services,
                                        const std::function<HttpServerStats()>& http_stats);

}  // namespace fp::api
