#pragma once

#include <memory>

#include "http/server.h"
#include "http/static_site.h"

namespace fp::api {

using http::HttpHandler;
using http::HttpRequest;
using http::HttpResponse;

// What a browser is told about every answer, the API's included: no answer may be framed
// (frame-ancestors 'none'), sniffed as another type (nosniff), or run script that is not one of
// the console's own files (a Content-Security-Policy without 'unsafe-inline'). Over TLS, also
// HSTS.
void AddBrowserSafetyHeaders(const HttpRequest& req, HttpResponse& answer);

// `api` with the console beside it (issue 24, CON-1): a GET of a page of the console's
// (`/`, `/login...`, `/projects/...`, `/system/...`, `/utilization`, `/settings/...`) is
// answered with its index.html, whose script routes it; a GET of one of its files with that
// file (hashed names under /assets/ cached for a year, the rest revalidated); anything else goes
// to `api`. With no console (null), `/` says how to get one. Every answer gets
// AddBrowserSafetyHeaders.
HttpHandler WithConsole(HttpHandler api, std::shared_ptr<const http::StaticSite> console);

}  // namespace fp::api
