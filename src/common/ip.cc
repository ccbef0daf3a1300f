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

// The text inet_ntop writes, written here: glibc's formats each number through sprintf, which
// made ToString 1% of a --dev server's samples (every NAT entry, view and log line of an
// address). ip_test.cc compares the two over every pattern of zero and non-zero groups.
std::string IpAddr::ToString() const {
  char buf[INET6_ADDRSTRLEN];
  char* p = buf;
  auto decimal = [&p](unsigned v) {
    if (v >= 100) *p++ = static_cast<char>('0' + v / 100);
    if (v >= 10) *p++ = static_cast<char>('0' + v / 10 % 10);
    *p++ = static_cast<char>('0' + v % 10);
  };
  auto dotted = [&](uint32_t a) {
    for (int shift = 24; shift >= 0; shift -= 8) {
      decimal((a >> shift) & 0xff);
      if (shift > 0) *p++ = '.';
    }
  };
  if (version_ == IpVersion::kV4) {
    dotted(static_cast<uint32_t>(value_));
    return std::string(buf, p);
  }
  std::array<unsigned, 8> group{};
  for (int i = 0; i < 8; ++i) {
    group[static_cast<size_t>(i)] = static_cast<unsigned>(value_ >> (112 - 16 * i)) & 0xffff;
  }
  // The longest run of zero groups (the first of equal ones), if two or more, becomes "::".
  int best = -1;
  int best_len = 0;
  for (int i = 0; i < 8;) {
    int j = i;
    while (j < 8 && group[static_cast<size_t>(j)] == 0) ++j;
    if (j - i > best_len) {
      best = i;
      best_len = j - i;
    }
    i = j == i ? i + 1 : j;
  }
  if (best_len < 2) best = -1;
  static constexpr char kHex[] = "0123456789abcdef";
  for (int i = 0; i < 8; ++i) {
    if (best >= 0 && i >= best && i < best + best_len) {
      if (i == best) *p++ = ':';
      continue;
    }
    if (i != 0) *p++ = ':';
    // An IPv4-compatible (::a.b.c.d) or IPv4-mapped (::ffff:a.b.c.d) address ends dotted.
    if (i == 6 && best == 0 && (best_len == 6 || (best_len == 5 && group[5] == 0xffff))) {
      dotted(static_cast<uint32_t>(value_));
      return std::string(buf, p);
    }
    const unsigned g = group[static_cast<size_t>(i)];
    bool digits = false;
    for (int shift = 12; shift >= 0; shift -= 4) {
      const unsigned nibble = (g >> shift) & 0xf;
      if (nibble == 0 && !digits && shift > 0) continue;
      digits = true;
      *p++ = kHex[nibble];
    }
  }
  if (best >= 0 && best + best_len == 8) *p++ = ':';
  return std::string(buf, p);
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
