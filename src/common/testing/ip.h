#pragma once

#include <string_view>

#include "common/ip.h"

namespace fp::testing {

// An address written out in a test. A typo throws (tl::bad_expected_access) and fails the
// test that made it.
inline IpAddr Ip(std::string_view text) { return IpAddr::Parse(text).value(); }

}  // namespace fp::testing
