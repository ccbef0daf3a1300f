#pragma once

#include <functional>

#include "app/control_plane.h"
#include "app/instances.h"
#include "http/server.h"

namespace fp::api {

using http::HttpHandler;
using http::HttpRequest;
using http::HttpResponse;
using http::HttpServerStats;

// The Oxide public API (the subset floatplane serves) plus floatplane's `/v1/system/tokens`
// extension, as one HTTP handler. Authenticates every request but `GET /v1/ping`, maps errors
// to the Oxide error body, and never lets an exception escape.
// `instances` may be null (no dataplane): instance and sled endpoints then answer 503.
// `http_stats`, if set, supplies the serving HTTP server's admission counters to `/metrics`; it
// is called on request threads and must be thread-safe.
HttpHandler MakeApiHandler(app::ControlPlane& control_plane, app::Instances* instances,
                           std::function<HttpServerStats()> http_stats = nullptr);

}  // namespace fp::api
