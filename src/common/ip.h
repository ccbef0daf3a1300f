#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"

namespace fp {

__extension__ typedef unsigned __int128 uint128;

enum class IpVersion { kV4, kV6 };

std::string_view ToString(IpVersion v);  // "v4" / "v6"
std::string_view Label(IpVersion v);     // "IPv4" / "IPv6"
std::optional<IpVersion> ParseIpVersion(std::string_view text);

// An IPv4 or IPv6 address held as an unsigned 128-bit number of its version. Ordering is by
// version first, then numerically, which is also the byte order of Key().
class IpAddr {
 public:
  IpAddr() = default;
  IpAddr(IpVersion version, uint128 value) : version_(version), value_(value) {}

  // Accepts dotted-quad IPv4 or any RFC 4291 text form of IPv6. InvalidRequest otherwise.
  static Result<IpAddr> Parse(std::string_view text);
  // Inverse of Key(); std::nullopt for a malformed key.
  static std::optional<IpAddr> FromKey(std::string_view key);

  IpVersion version() const { return version_; }
  uint128 value() const { return value_; }
  uint128 max_value() const {
    return version_ == IpVersion::kV4 ? uint128{0xffffffffu} : ~uint128{0};
  }

  std::string ToString() const;
  // A compact byte string whose memcmp order equals address order within a version and puts
  // every IPv4 address before every IPv6 address: a version byte (4 or 6) then the address in
  // network byte order. This is the datastore's representation.
  std::string Key() const;

  // The next/previous address; callers check bounds (value() < max_value(), value() > 0).
  IpAddr Next() const { return {version_, value_ + 1}; }
  IpAddr Prev() const { return {version_, value_ - 1}; }

  auto operator<=>(const IpAddr&) const = default;

 private:
  IpVersion version_ = IpVersion::kV4;
  uint128 value_ = 0;
};

// An inclusive range of addresses of one version, first <= last.
struct IpRange {
  IpAddr first;
  IpAddr last;

  // Validates version agreement and order; the messages are the API's.
  static Result<IpRange> Make(IpAddr first, IpAddr last);

  IpVersion version() const { return first.version(); }
  bool Contains(const IpAddr& a) const { return first <= a && a <= last; }
  bool Overlaps(const IpRange& o) const { return first <= o.last && o.first <= last; }
  // Number of addresses as a double (exact up to 2^53; IPv6 ranges may be larger).
  double SizeAsDouble() const;
  std::string ToString() const { return first.ToString() + "-" + last.ToString(); }
};

}  // namespace fp
