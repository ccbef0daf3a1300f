#pragma once

// Console sessions on the wire (users.cc): the session cookie, set at login and cleared at
// logout, and how a request's cookie is read.

#include <optional>
#include <string>
#include <string_view>

#include "app/users.h"
#include "http/server.h"

namespace fp::api {

inline constexpr std::string_view kSessionCookie = "session";

// Set-Cookie of a new session: HttpOnly (no script reads it), SameSite=Strict, Secure over TLS.
std::string SessionCookie(const app::NewSession& session, bool secure);
// Set-Cookie that makes the browser forget the session.
std::string ExpiredSessionCookie(bool secure);
// The value of cookie `name` in the request's Cookie headers.
std::optional<std::string> CookieValue(const http::HttpRequest& req, std::string_view name);

}  // namespace fp::api
