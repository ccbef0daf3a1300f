#pragma once

// Request-target parsing for the server side of HTTP: the path's segments, percent-decoding
// (Boost.URL) and query strings. Lenient on purpose: any byte the HTTP parser let through is
// taken as is; only a '%' not followed by two hex digits is an error, so that what the API
// answers for odd input does not depend on RFC 3986's character classes.

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace fp::http {

// A request target ("/v1/x?a=b") split at its first '?': the percent-encoded path and the raw
// query without the '?' (empty when there is none). The views point into the target.
struct RequestTarget {
  std::string_view path;
  std::string_view query;
};
RequestTarget SplitTarget(std::string_view target);

// The non-empty segments of a URL path: "/v1//ip-pools/x/" -> {"v1", "ip-pools", "x"}, still
// percent-encoded. The views point into `path`.
std::vector<std::string_view> PathSegments(std::string_view path);

// What '+' decodes to: itself in a path, a space in a query (form encoding).
enum class Plus { kLiteral, kSpace };

// Percent-decodes `in`. InvalidRequest `invalid percent-encoding` when a '%' is not followed by
// two hex digits. Decoded bytes are not checked (%00 and invalid UTF-8 come through).
Result<std::string> PercentDecode(std::string_view in, Plus plus);

// Decoded query parameters by name; of a repeated name, the last value.
using QueryParams = std::map<std::string, std::string, std::less<>>;

// Parses a raw query string ("a=1&b=x%20y&flag"): parts split at '&' (empty parts skipped),
// name and value at the first '=' (no '=': the value is empty), both percent-decoded with '+'
// as a space. InvalidRequest `unable to parse query string: invalid percent-encoding`.
Result<QueryParams> ParseQuery(std::string_view raw);

}  // namespace fp::http
