#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/url_path.h"

namespace fp::api {

// Path parameters captured from `{name}` segments, percent-decoded.
using PathParams = std::map<std::string, std::string, std::less<>>;

// Maps (method, path pattern) to a value of type T. Patterns are literal segments and
// `{param}` segments, e.g. "/v1/system/ip-pools/{pool}/silos/{silo}".
template <typename T>
class Router {
 public:
  struct Match {
    const T* target;
    PathParams params;
  };

  void Add(std::string method, std::string_view pattern, T target) {
    routes_.push_back(Route{std::move(method), Split(pattern), std::move(target)});
  }

  // NotFound when no pattern matches the path; InvalidRequest-shaped 405 is reported as
  // `method_allowed == false` by returning NotFound with a distinct message.
  Result<Match> Find(std::string_view method, std::string_view path) const {
    std::vector<std::string> segments = Split(path);
    bool path_matched = false;
    for (const Route& r : routes_) {
      PathParams params;
      if (!MatchSegments(r.segments, segments, params)) continue;
      path_matched = true;
      if (r.method != method) continue;
      return Match{&r.target, std::move(params)};
    }
    if (path_matched) return Fail(Error(ErrorKind::kInvalidRequest, "method not allowed"));
    return Fail(Error::NotFound(std::string("no route for ") + std::string(path)));
  }

 private:
  struct Route {
    std::string method;
    std::vector<std::string> segments;
    T target;
  };

  static std::vector<std::string> Split(std::string_view path) {
    std::vector<std::string> out;
    for (std::string_view segment : PathSegments(path)) out.emplace_back(segment);
    return out;
  }

  static bool MatchSegments(const std::vector<std::string>& pattern,
                            const std::vector<std::string>& path, PathParams& params);

  std::vector<Route> routes_;
};

// Decodes a captured path segment; false if the percent-encoding is invalid.
bool DecodePathSegment(const std::string& raw, std::string& out);

template <typename T>
bool Router<T>::MatchSegments(const std::vector<std::string>& pattern,
                              const std::vector<std::string>& path, PathParams& params) {
  if (pattern.size() != path.size()) return false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const std::string& p = pattern[i];
    if (p.size() > 2 && p.front() == '{' && p.back() == '}') {
      std::string decoded;
      if (!DecodePathSegment(path[i], decoded)) return false;
      params.emplace(p.substr(1, p.size() - 2), std::move(decoded));
    } else if (p != path[i]) {
      return false;
    }
  }
  return true;
}

}  // namespace fp::api
