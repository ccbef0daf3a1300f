#include "api/console.h"

#include <array>
#include <string_view>
#include <utility>

#include "http/url.h"

namespace fp::api {
namespace {

// The console loads its script, styles, images and fonts from its own origin, talks to the API
// on the same origin, and runs no inline script or style sheet.
constexpr std::string_view kConsolePolicy =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'";
// An answer of the API is data, never a document.
constexpr std::string_view kApiPolicy = "default-src 'none'; frame-ancestors 'none'";

// The first path segments that are pages of the console (its router's top-level routes).
constexpr std::array<std::string_view, 6> kPageRoots = {"",       "login",       "projects",
                                                        "system", "utilization", "settings"};

bool IsConsolePage(std::string_view path) {
  auto segments = http::PathSegments(path);
  std::string_view root = segments.empty() ? std::string_view() : segments[0];
  for (std::string_view page : kPageRoots) {
    if (root == page) return true;
  }
  return false;
}

// Whether an If-None-Match header names `etag` (a list, weak or strong, or "*": RFC 9110
// 13.1.2 compares weakly).
bool Revalidates(std::string_view header, std::string_view etag) {
  while (!header.empty()) {
    size_t comma = header.find(',');
    std::string_view tag = header.substr(0, comma);
    header = comma == std::string_view::npos ? std::string_view() : header.substr(comma + 1);
    while (!tag.empty() && tag.front() == ' ') tag.remove_prefix(1);
    while (!tag.empty() && tag.back() == ' ') tag.remove_suffix(1);
    if (tag.starts_with("W/")) tag.remove_prefix(2);
    if (tag == "*" || tag == etag) return true;
  }
  return false;
}

HttpResponse FileAnswer(const HttpRequest& req, const http::StaticSite::File& file,
                        bool immutable) {
  HttpResponse answer;
  answer.content_type = file.content_type;
  answer.headers.emplace_back("cache-control",
                              immutable ? "public, max-age=31536000, immutable" : "no-cache");
  answer.headers.emplace_back("etag", file.etag);
  if (Revalidates(req.Header("if-none-match"), file.etag)) {
    answer.status = 304;
    return answer;
  }
  answer.body = file.body;
  return answer;
}

}  // namespace

void AddBrowserSafetyHeaders(const HttpRequest& req, HttpResponse& answer) {
  const bool html = answer.content_type.starts_with("text/html");
  answer.headers.emplace_back("content-security-policy", html ? kConsolePolicy : kApiPolicy);
  answer.headers.emplace_back("x-content-type-options", "nosniff");
  answer.headers.emplace_back("x-frame-options", "DENY");
  answer.headers.emplace_back("referrer-policy", "same-origin");
  if (req.tls) answer.headers.emplace_back("strict-transport-security", "max-age=31536000");
}

HttpHandler WithConsole(HttpHandler api, std::shared_ptr<const http::StaticSite> console) {
  return [api = std::move(api), console = std::move(console)](const HttpRequest& req) {
    HttpResponse answer;
    // HEAD is answered as GET (the server sends its headers only).
    const bool get = req.method == "GET" || req.method == "HEAD";
    const http::StaticSite::File* file = nullptr;
    if (get && console && (file = console->Find(req.path))) {
      answer = FileAnswer(req, *file, req.path.starts_with("/assets/"));
    } else if (get && console && IsConsolePage(req.path)) {
      answer = FileAnswer(req, console->Index(), false);
    } else if (get && !console && http::PathSegments(req.path).empty()) {
      answer.status = 404;
      answer.content_type = "text/plain; charset=utf-8";
      answer.body =
          "This floatplane server serves the API only: start it with --console-dir DIR (a "
          "built console, `npm run build` in console/) for the web console.\n";
    } else {
      answer = api(req);
    }
    AddBrowserSafetyHeaders(req, answer);
    return answer;
  };
}

}  // namespace fp::api
