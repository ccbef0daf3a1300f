#pragma once

#include <string>
#include <string_view>

namespace fp {

// SHA-256 of `data` as 64 lowercase hex digits (OpenSSL's libcrypto). Used for stored token
// secrets and for the fingerprint of a keyed request. Thread-safe.
std::string Sha256Hex(std::string_view data);

}  // namespace fp
