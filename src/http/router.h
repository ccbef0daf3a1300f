#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <tl/expected.hpp>
#include <utility>
#include <vector>

#include "http/url.h"

namespace fp::http {

// Path parameters captured from `{name}` segments, percent-decoded.
using PathParams = std::map<std::string, std::string, std::less<>>;

// Why Router::Find found no target. Each caller answers these in its own words (the API with
// 404 and 405, the simulated agents with their error bodies).
struct RouteMiss {
  enum class Kind {
    // No pattern matches the path.
    kNotFound,
    // A pattern matches the path, but not with this method.
    kMethodNotAllowed,
    // No pattern matches, and a segment where a pattern has a `{param}` is not valid
    // percent-encoding (`segment` is that segment, as received).
    kMalformedSegment,
  };
  Kind kind = Kind::kNotFound;
  std::string segment;
};

// Maps (method, path pattern) to a value of type T. Patterns are literal segments and
// `{param}` segments, e.g. "/v1/system/ip-pools/{pool}/silos/{silo}"; empty segments are
// ignored in patterns and paths alike ("//a/" is "/a"). Literal segments compare with the
// path's segments as received (percent-encoded). Routes are tried in the order added; the first
// that matches path and method wins.
//
// Not thread-safe to Add; Find is const and may run concurrently once routes are added.
template <typename T>
class Router {
 public:
  struct Match {
    const T* target;
    PathParams params;
    const std::string* pattern;  // the route's pattern as added (a metric's route label)
  };

  void Add(std::string method, std::string_view pattern, T target) {
    routes_.push_back(
        Route{std::move(method), Split(pattern), std::move(target), std::string(pattern)});
  }

  // Each route's (method, pattern), in the order added.
  std::vector<std::pair<std::string, std::string>> Patterns() const {
    std::vector<std::pair<std::string, std::string>> out;
    for (const Route& r : routes_) out.emplace_back(r.method, r.pattern);
    return out;
  }

  // The target for `method` and the percent-encoded `path`, with the path's parameters.
  // A miss is kMethodNotAllowed if any pattern matches the path, else kMalformedSegment if a
  // pattern failed only on a malformed `{param}` segment, else kNotFound.
  tl::expected<Match, RouteMiss> Find(std::string_view method, std::string_view path) const {
    std::vector<std::string_view> segments = PathSegments(path);
    bool path_matched = false;
    std::string_view malformed;
    for (const Route& r : routes_) {
      PathParams params;
      if (!MatchSegments(r.segments, segments, params, malformed)) continue;
      path_matched = true;
      if (r.method != method) continue;
      return Match{&r.target, std::move(params), &r.pattern};
    }
    if (path_matched) return tl::unexpected(RouteMiss{RouteMiss::Kind::kMethodNotAllowed, {}});
    if (!malformed.empty()) {
      return tl::unexpected(RouteMiss{RouteMiss::Kind::kMalformedSegment, std::string(malformed)});
    }
    return tl::unexpected(RouteMiss{RouteMiss::Kind::kNotFound, {}});
  }

 private:
  struct Route {
    std::string method;
    std::vector<std::string> segments;
    T target;
    std::string pattern;
  };

  static std::vector<std::string> Split(std::string_view pattern) {
    std::vector<std::string> out;
    for (std::string_view segment : PathSegments(pattern)) out.emplace_back(segment);
    return out;
  }

  // Whether `path` matches `pattern`, segment by segment in order, capturing `{param}`s into
  // `params`. A `{param}` segment that does not decode ends the match and is noted in
  // `malformed`.
  static bool MatchSegments(const std::vector<std::string>& pattern,
                            const std::vector<std::string_view>& path, PathParams& params,
                            std::string_view& malformed) {
    if (pattern.size() != path.size()) return false;
    for (size_t i = 0; i < pattern.size(); ++i) {
      const std::string& p = pattern[i];
      if (p.size() > 2 && p.front() == '{' && p.back() == '}') {
        auto decoded = PercentDecode(path[i], Plus::kLiteral);
        if (!decoded) {
          malformed = path[i];
          return false;
        }
        params.emplace(p.substr(1, p.size() - 2), std::move(*decoded));
      } else if (p != path[i]) {
        return false;
      }
    }
    return true;
  }

  std::vector<Route> routes_;
};

}  // namespace fp::http
