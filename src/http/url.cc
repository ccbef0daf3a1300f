#include "http/url.h"

#include <boost/url/encoding_opts.hpp>
#include <boost/url/pct_string_view.hpp>

namespace fp::http {

RequestTarget SplitTarget(std::string_view target) {
  size_t q = target.find('?');
  if (q == std::string_view::npos) return RequestTarget{target, {}};
  return RequestTarget{target.substr(0, q), target.substr(q + 1)};
}

std::vector<std::string_view> PathSegments(std::string_view path) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while (pos < path.size()) {
    if (path[pos] == '/') {
      ++pos;
      continue;
    }
    size_t next = path.find('/', pos);
    if (next == std::string_view::npos) next = path.size();
    out.push_back(path.substr(pos, next - pos));
    pos = next;
  }
  return out;
}

Result<std::string> PercentDecode(std::string_view in, Plus plus) {
  // make_pct_string_view checks the escapes only, not which characters appear unescaped.
  auto encoded = boost::urls::make_pct_string_view(in);
  if (!encoded) return Fail(Error::InvalidRequest("invalid percent-encoding"));
  boost::urls::encoding_opts options;
  options.space_as_plus = plus == Plus::kSpace;
  return encoded->decode(options);
}

// The split on '&' and '=' is ours and the decoding Boost.URL's: boost::urls::parse_query
// rejects characters outside RFC 3986's query grammar (an unescaped space, '"', '|', '[')
// that clients send and the API has always accepted.
Result<QueryParams> ParseQuery(std::string_view raw) {
  QueryParams out;
  size_t pos = 0;
  while (pos < raw.size()) {
    size_t amp = raw.find('&', pos);
    if (amp == std::string_view::npos) amp = raw.size();
    std::string_view part = raw.substr(pos, amp - pos);
    pos = amp + 1;
    if (part.empty()) continue;
    size_t eq = part.find('=');
    auto name = PercentDecode(part.substr(0, eq), Plus::kSpace);
    auto value =
        PercentDecode(eq == std::string_view::npos ? "" : part.substr(eq + 1), Plus::kSpace);
    if (!name || !value) {
      return Fail(Error::InvalidRequest("unable to parse query string: invalid percent-encoding"));
    }
    out.insert_or_assign(std::move(*name), std::move(*value));
  }
  return out;
}

}  // namespace fp::http
