#include "api/console.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace fp::api {
namespace {

namespace fs = std::filesystem;

std::string HeaderOf(const HttpResponse& answer, std::string_view name) {
  for (const auto& [k, v] : answer.headers) {
    if (k == name) return v;
  }
  return "";
}

HttpRequest Get(std::string path) {
  HttpRequest req;
  req.method = "GET";
  req.path = std::move(path);
  return req;
}

class ConsoleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/console-XXXXXX";
    dir_ = mkdtemp(pattern);
    fs::create_directories(dir_ / "assets");
    std::ofstream(dir_ / "index.html") << "<!doctype html><div id=root></div>";
    std::ofstream(dir_ / "assets" / "app-1f2e.js") << "run()";
    auto site = http::StaticSite::Load(dir_);
    ASSERT_TRUE(site);
    site_ = *site;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // An API that answers every request with a JSON 404 naming its path.
  static HttpResponse Api(const HttpRequest& req) {
    return HttpResponse{.status = 404, .body = "{\"api\":\"" + req.path + "\"}"};
  }

  fs::path dir_;
  std::shared_ptr<const http::StaticSite> site_;
};

TEST_F(ConsoleTest, PagesGetTheAppFilesGetThemselvesAndTheRestGoesToTheApi) {
  HttpHandler handler = WithConsole(Api, site_);
  for (const char* page : {"/", "/login", "/projects/web/floating-ips", "/system/ip-pools/p1",
                           "/utilization", "/settings/profile"}) {
    HttpResponse answer = handler(Get(page));
    EXPECT_EQ(answer.status, 200) << page;
    EXPECT_EQ(answer.body, "<!doctype html><div id=root></div>") << page;
    EXPECT_EQ(answer.content_type, "text/html; charset=utf-8");
    EXPECT_EQ(HeaderOf(answer, "cache-control"), "no-cache") << page;
  }
  HttpResponse script = handler(Get("/assets/app-1f2e.js"));
  EXPECT_EQ(script.body, "run()");
  EXPECT_EQ(script.content_type, "text/javascript; charset=utf-8");
  EXPECT_EQ(HeaderOf(script, "cache-control"), "public, max-age=31536000, immutable");
  // A revalidation of what the browser has gets 304 and no body.
  HttpRequest again = Get("/assets/app-1f2e.js");
  again.headers.emplace_back("if-none-match", HeaderOf(script, "etag"));
  HttpResponse not_modified = handler(again);
  EXPECT_EQ(not_modified.status, 304);
  EXPECT_TRUE(not_modified.body.empty());
  // A list of validators, weak or strong, revalidates too; another file's does not.
  for (const std::string& header : {"\"x\", W/" + HeaderOf(script, "etag"), std::string("*")}) {
    HttpRequest listed = Get("/assets/app-1f2e.js");
    listed.headers.emplace_back("if-none-match", header);
    EXPECT_EQ(handler(listed).status, 304) << header;
  }
  HttpRequest other = Get("/assets/app-1f2e.js");
  other.headers.emplace_back("if-none-match", "\"x\", W/\"y\"");
  EXPECT_EQ(handler(other).status, 200);
  // HEAD is answered as GET (the HTTP server drops the body).
  HttpRequest head = Get("/projects");
  head.method = "HEAD";
  EXPECT_EQ(handler(head).content_type, "text/html; charset=utf-8");
  // The API's paths, a missing asset, an unknown root and a write to a page are the API's.
  for (const char* path : {"/v1/projects", "/assets/missing.js", "/metrics", "/v1", "/nope"}) {
    EXPECT_EQ(handler(Get(path)).body, std::string("{\"api\":\"") + path + "\"}") << path;
  }
  HttpRequest post = Get("/projects");
  post.method = "POST";
  EXPECT_EQ(handler(post).body, "{\"api\":\"/projects\"}");
}

TEST_F(ConsoleTest, EveryAnswerForbidsFramingSniffingAndInlineScript) {
  HttpHandler handler = WithConsole(Api, site_);
  HttpResponse page = handler(Get("/"));
  std::string policy = HeaderOf(page, "content-security-policy");
  EXPECT_NE(policy.find("script-src 'self'"), std::string::npos) << policy;
  EXPECT_NE(policy.find("frame-ancestors 'none'"), std::string::npos) << policy;
  EXPECT_EQ(policy.find("unsafe-inline"), std::string::npos) << policy;
  EXPECT_EQ(policy.find("unsafe-eval"), std::string::npos) << policy;
  EXPECT_EQ(HeaderOf(page, "x-content-type-options"), "nosniff");
  EXPECT_EQ(HeaderOf(page, "strict-transport-security"), "");
  HttpResponse api = handler(Get("/v1/projects"));
  EXPECT_EQ(HeaderOf(api, "content-security-policy"), "default-src 'none'; frame-ancestors 'none'");
  EXPECT_EQ(HeaderOf(api, "x-content-type-options"), "nosniff");
  HttpRequest over_tls = Get("/");
  over_tls.tls = true;
  EXPECT_EQ(HeaderOf(handler(over_tls), "strict-transport-security"), "max-age=31536000");
}

TEST_F(ConsoleTest, WithoutAConsoleTheRootSaysHowToServeOne) {
  HttpHandler handler = WithConsole(Api, nullptr);
  HttpResponse root = handler(Get("/"));
  EXPECT_EQ(root.status, 404);
  EXPECT_NE(root.body.find("--console-dir"), std::string::npos);
  EXPECT_EQ(handler(Get("/projects")).body, "{\"api\":\"/projects\"}");
  EXPECT_EQ(HeaderOf(root, "x-content-type-options"), "nosniff");
}

}  // namespace
}  // namespace fp::api
