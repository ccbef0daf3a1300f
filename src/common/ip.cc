#include "common/ip.h"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <array>

namespace fp {

std::string_view ToString(IpVersion v) { return v == IpVersion::kV4 ? "v4" : "v6"; }
std::string_view Label(IpVersion v) { return v == IpVersion::kV4 ? "IPv4" : "IPv6"; }

std::optional<IpVersion> ParseIpVersion(std::string_view text) {
  if (text == "v4") return IpVersion::kV4;
  if (text == "v6") return IpVersion::kV6;
  return std::nullopt;
}

Result<IpAddr> IpAddr::Parse(std::string_view text) {
  if (text.size() > INET6_ADDRSTRLEN || text.find('\0') != std::string_view::npos) {
    return Fail(Error::InvalidRequest("invalid IP address syntax"));
  }
  std::string s(text);
  if (s.find(':') == std::string::npos) {
    in_addr a4{};
    if (inet_pton(AF_INET, s.c_str(), &a4) == 1) {
      return IpAddr(IpVersion::kV4, ntohl(a4.s_addr));
    }
  } else {
    in6_addr a6{};
    if (inet_pton(AF_INET6, s.c_str(), &a6) == 1) {
      uint128 v = 0;
      for (uint8_t b : a6.s6_addr) v = (v << 8) | b;
      return IpAddr(IpVersion::kV6, v);
    }
  }
  return Fail(Error::InvalidRequest(fmt::format("invalid IP address syntax: \"{}\"", text)));
}

std::optional<IpAddr> IpAddr::FromKey(std::string_view key) {
  if (key.size() == 5 && key[0] == 4) {
    uint128 v = 0;
    for (size_t i = 1; i < 5; ++i) v = (v << 8) | static_cast<uint8_t>(key[i]);
    return IpAddr(IpVersion::kV4, v);
  }
  if (key.size() == 17 && key[0] == 6) {
    uint128 v = 0;
    for (size_t i = 1; i < 17; ++i) v = (v << 8) | static_cast<uint8_t>(key[i]);
    return IpAddr(IpVersion::kV6, v);
  }
  return std::nullopt;
}

std::string IpAddr::Key() const {
  size_t n = version_ == IpVersion::kV4 ? 4 : 16;
  std::string out(n + 1, '\0');
  out[0] = static_cast<char>(version_ == IpVersion::kV4 ? 4 : 6);
  uint128 v = value_;
  for (size_t i = n; i >= 1; --i) {
    out[i] = static_cast<char>(static_cast<uint8_t>(v & 0xff));
    v >>= 8;
  }
  return out;
}

std::string IpAddr::ToString() const {
  char buf[INET6_ADDRSTRLEN] = {};
  if (version_ == IpVersion::kV4) {
    in_addr a4{};
    a4.s_addr = htonl(static_cast<uint32_t>(value_));
    inet_ntop(AF_INET, &a4, buf, sizeof buf);
  } else {
    in6_addr a6{};
    uint128 v = value_;
    for (int i = 15; i >= 0; --i) {
      a6.s6_addr[i] = static_cast<uint8_t>(v & 0xff);
      v >>= 8;
    }
    inet_ntop(AF_INET6, &a6, buf, sizeof buf);
  }
  return buf;
}

Result<IpRange> IpRange::Make(IpAddr first, IpAddr last) {
  if (first.version() != last.version()) {
    return Fail(Error::InvalidRequest(
        fmt::format("IP range first address {} and last address {} must be the same IP version",
                    first.ToString(), last.ToString())));
  }
  if (last < first) {
    return Fail(Error::InvalidRequest("IP address ranges must be non-decreasing"));
  }
  return IpRange{first, last};
}

double IpRange::SizeAsDouble() const {
  return static_cast<double>(last.value() - first.value()) + 1.0;
}

}  // namespace fp
