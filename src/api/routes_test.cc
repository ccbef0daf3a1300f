// The API handler driven in-process (no sockets) over a temporary datastore, without sled
// agents.

#include "api/routes.h"

#include <gtest/gtest.h>

#include "app/testing/services.h"

namespace fp::api {
namespace {

class RoutesTest : public ::testing::Test {
 protected:
  RoutesTest()
      : handler_(
            MakeApiHandler(Services{app_.silos, app_.projects, app_.ip_pools, app_.floating_ips,
                                    app_.tokens, app_.users, nullptr, nullptr, app_.idempotency,
                                    app_.audit, app_.sagas, app_.store_stats, app_.ds->clock()})) {
    secret_ = **app_.tokens.BootstrapDev();
  }

  HttpResponse Call(const std::string& method, const std::string& target,
                    const std::string& body = "",
                    std::vector<std::pair<std::string, std::string>> headers = {}) {
    HttpRequest req;
    req.method = method;
    auto q = target.find('?');
    req.path = target.substr(0, q);
    if (q != std::string::npos) req.query = target.substr(q + 1);
    req.body = body;
    req.request_id = "rid-" + std::to_string(++requests_);
    req.headers = std::move(headers);
    if (!secret_.empty()) req.headers.emplace_back("authorization", "Bearer " + secret_);
    return handler_(req);
  }
  static Json Body(const HttpResponse& r) { return Json::parse(r.body); }
  static std::string Header(const HttpResponse& r, const std::string& name) {
    for (const auto& [k, v] : r.headers) {
      if (k == name) return v;
    }
    return "";
  }

  app::testing::TempServices app_;
  HttpHandler handler_;
  std::string secret_;
  int requests_ = 0;
};

TEST_F(RoutesTest, UnknownPathIs404AndKnownPathWithOtherMethodIs405) {
  HttpResponse missing = Call("GET", "/v1/nothing-here");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(
      Body(missing),
      (Json{{"request_id", "rid-1"}, {"error_code", "ObjectNotFound"}, {"message", "Not Found"}}));
  HttpResponse method = Call("PATCH", "/v1/projects");
  EXPECT_EQ(method.status, 405);
  EXPECT_EQ(Body(method), (Json{{"request_id", "rid-2"},
                                {"error_code", "MethodNotAllowed"},
                                {"message", "method not allowed"}}));
  // Ping is GET only, and outside the router: another method is not found.
  EXPECT_EQ(Call("POST", "/v1/ping").status, 404);
}

TEST_F(RoutesTest, PingAndMetricsNeedNoTokenOtherRoutesDo) {
  secret_.clear();
  HttpResponse ping = Call("GET", "/v1/ping");
  EXPECT_EQ(ping.status, 200);
  EXPECT_EQ(ping.body, R"({"status":"ok"})");
  HttpResponse metrics = Call("GET", "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_EQ(metrics.content_type, "text/plain; version=0.0.4");
  EXPECT_NE(metrics.body.find("\nfloatplane_saga_rows 0\n"), std::string::npos);
  EXPECT_NE(metrics.body.find("floatplane_durable_commits_total "), std::string::npos);
  HttpResponse projects = Call("GET", "/v1/projects");
  EXPECT_EQ(projects.status, 401);
  EXPECT_EQ(Body(projects)["error_code"], "Unauthenticated");
}

TEST_F(RoutesTest, ProjectCreateListAndViewGoThroughTheirRoutes) {
  HttpResponse created = Call("POST", "/v1/projects", R"({"name":"web","description":"d"})");
  ASSERT_EQ(created.status, 201) << created.body;
  EXPECT_EQ(Body(created)["name"], "web");
  HttpResponse list = Call("GET", "/v1/projects?limit=1");
  ASSERT_EQ(list.status, 200);
  EXPECT_EQ(Body(list)["items"].size(), 1u);
  EXPECT_TRUE(Body(list)["next_page"].is_string());  // a full page
  EXPECT_EQ(Call("GET", "/v1/projects/web").status, 200);
  HttpResponse bad = Call("GET", "/v1/projects/Bad_Name");
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(Body(bad)["message"].get<std::string>().find("bad path parameter \"project\""),
            std::string::npos);
}

TEST_F(RoutesTest, InstanceRoutesAnswer503WithoutSledAgents) {
  HttpResponse r = Call("GET", "/v1/instances?project=web");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(Header(r, "retry-after"), "1");
  EXPECT_EQ(Body(r)["message"], "this server runs without sled agents");
}

TEST_F(RoutesTest, ARetryWithTheSameKeyIsReplayedAndAnotherRequestUnderItIs422) {
  const std::string body = R"({"name":"db","description":""})";
  HttpResponse first = Call("POST", "/v1/projects", body, {{"idempotency-key", "k1"}});
  ASSERT_EQ(first.status, 201) << first.body;
  EXPECT_EQ(Header(first, "idempotent-replayed"), "");
  HttpResponse again = Call("POST", "/v1/projects", body, {{"idempotency-key", "k1"}});
  EXPECT_EQ(again.status, 201);
  EXPECT_EQ(again.body, first.body);
  EXPECT_EQ(Header(again, "idempotent-replayed"), "true");
  HttpResponse other = Call("POST", "/v1/projects", R"({"name":"db2","description":""})",
                            {{"idempotency-key", "k1"}});
  EXPECT_EQ(other.status, 422);
  // Without the key the same body is a new request: the name is taken.
  EXPECT_EQ(Call("POST", "/v1/projects", body).status, 400);
}

TEST_F(RoutesTest, SagasListIsForFleetAdminsBeforeItsQueryIsRead) {
  HttpResponse ok = Call("GET", "/v1/system/sagas");
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(Body(ok), (Json{{"items", Json::array()}, {"next_page", nullptr}}));
  const app::Actor admin{Uuid::Random(), Uuid::Random(), model::Role::kFleetAdmin};
  auto viewer = app_.tokens.Create(app::Unrecorded{admin}, NameOrId(*Name::Parse("default")),
                                   model::Role::kSiloViewer, "viewer");
  ASSERT_TRUE(viewer);
  secret_ = viewer->secret;
  EXPECT_EQ(Call("GET", "/v1/system/sagas?limit=bad").status, 403);
}

}  // namespace
}  // namespace fp::api
