#pragma once

// The one parser of "HOST:PORT" text, for the --listen flags, the agents' base URLs and the
// address a server prints.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"

namespace fp::http {

struct HostPort {
  std::string host;  // a name, an IPv4 address or an IPv6 address (without brackets); may be ""
  uint16_t port = 0;
};

// Parses "HOST:PORT", an IPv6 host in brackets ("[::1]:8080"); an unbracketed host is what
// precedes the last ':'. With `default_port`, the port may be left out ("HOST", "[IPV6]",
// "HOST:"), and is then that. The host is not checked (an empty host is returned as such).
// InvalidRequest, with a message meant to follow the caller's naming of the text
// (`--listen "x": <message>`):
//  - `expected [IPV6]:PORT` for a '[' without ']' or with something but ":PORT" after it;
//  - `expected HOST:PORT` when the port is missing and there is no default;
//  - `the port must be a number from 0 to 65535` otherwise (digits only).
Result<HostPort> ParseHostPort(std::string_view text,
                               std::optional<uint16_t> default_port = std::nullopt);

// The host as it appears in a URL or in HOST:PORT: an IPv6 address in brackets.
std::string UrlHost(std::string_view host);

}  // namespace fp::http
