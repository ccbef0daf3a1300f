#pragma once

#include "api/http_server.h"
#include "app/control_plane.h"

namespace fp::api {

// The Oxide public API (the subset floatplane serves) plus floatplane's `/v1/system/tokens`
// extension, as one HTTP handler. Authenticates every request but `GET /v1/ping`, maps errors
// to the Oxide error body, and never lets an exception escape.
HttpHandler MakeApiHandler(app::ControlPlane& control_plane);

}  // namespace fp::api
