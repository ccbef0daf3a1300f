#pragma once

#include <functional>
#include <string>

#include "api/endpoint.h"
#include "http/server.h"

namespace fp::api {

// The Oxide public API (the subset floatplane serves) plus floatplane's `/v1/system/tokens`
// and `/v1/system/sagas` extensions, as one HTTP handler. Authenticates every request but
// `GET /v1/ping` and `GET /metrics`, maps errors to the Oxide error body, and never lets an
// exception escape. `services.instances` may be null (no dataplane): instance and sled
// endpoints then answer 503. `http_stats`, if set, supplies the serving HTTP server's admission
// counters to `/metrics`; it is called on request threads and must be thread-safe.
// `more_metrics`, if set, appends to /metrics the families of the parts the API does not see
// (sagas, NAT, sleds, pools); it is called on request threads and must be thread-safe.
HttpHandler MakeApiHandler(Services services, std::function<HttpServerStats()> http_stats = nullptr,
                           std::function<void(std::string&)> more_metrics = nullptr);

}  // namespace fp::api
