#include "http/host_port.h"

namespace fp::http {

Result<HostPort> ParseHostPort(std::string_view text, std::optional<uint16_t> default_port) {
  HostPort out;
  std::optional<std::string_view> port;  // the text after the host's ':', if there is one
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    std::string_view after =
        close == std::string_view::npos ? std::string_view{} : text.substr(close + 1);
    if (close == std::string_view::npos || (!after.empty() && after.front() != ':') ||
        (after.empty() && !default_port)) {
      return Fail(Error::InvalidRequest("expected [IPV6]:PORT"));
    }
    out.host = std::string(text.substr(1, close - 1));
    if (!after.empty()) port = after.substr(1);
  } else {
    size_t colon = text.rfind(':');
    out.host = std::string(text.substr(0, colon));
    if (colon != std::string_view::npos) port = text.substr(colon + 1);
  }
  if (!port || (port->empty() && default_port)) {
    if (!default_port) return Fail(Error::InvalidRequest("expected HOST:PORT"));
    out.port = *default_port;
    return out;
  }
  uint32_t value = 0;
  bool ok = !port->empty() && port->size() <= 5;
  for (char c : *port) {
    ok = ok && c >= '0' && c <= '9';
    if (ok) value = value * 10 + static_cast<uint32_t>(c - '0');
  }
  if (!ok || value > 65535) {
    return Fail(Error::InvalidRequest("the port must be a number from 0 to 65535"));
  }
  out.port = static_cast<uint16_t>(value);
  return out;
}

std::string UrlHost(std::string_view host) {
  if (host.find(':') == std::string_view::npos) return std::string(host);
  // Appended piecewise: gcc 12's -Wrestrict misfires on "[" + std::string + "]" at -O2.
  std::string bracketed;
  bracketed.reserve(host.size() + 2);
  bracketed += '[';
  bracketed += host;
  bracketed += ']';
  return bracketed;
}

}  // namespace fp::http
