// An instance's external IPs: /v1/instances/{instance}/external-ips and its ephemeral IP.

#include "api/bodies.h"
#include "api/endpoint.h"
#include "api/views.h"

namespace fp::api {

void AddExternalIpRoutes(Routes& r) {
  r.Add("GET", "/v1/instances/{instance}/external-ips", [](const Ctx& c) -> Result<Reply> {
    auto instance = FP_TRY(c.PathNameOrId("instance"));
    auto project = FP_TRY(c.query.OptNameOrId("project"));
    Json items = Json::array();
    for (const auto& e : FP_TRY(FP_TRY(c.Compute())->ExternalIps(c.actor, instance, project))) {
      items.push_back(ExternalIpView(e));
    }
    return Reply{200, Json{{"items", items}, {"next_page", nullptr}}};
  });
  r.Add(
      "POST", "/v1/instances/{instance}/external-ips/ephemeral",
      Endpoint(
          [](const Ctx& c) -> Result<Reply> {
            auto instance = FP_TRY(c.PathNameOrId("instance"));
            auto project = FP_TRY(c.query.OptNameOrId("project"));
            Json body = FP_TRY(c.Body(/*allow_empty=*/true));
            Fields f(body, "");
            model::PoolSelector selector;
            if (!f.IsNullOrAbsent("pool_selector")) {
              selector = FP_TRY(ParsePoolSelector(FP_TRY(f.Object("pool_selector"))));
            }
            return Reply{202, ExternalIpView(FP_TRY(FP_TRY(c.Compute())
                                                        ->AttachEphemeral(c.Saga(202), instance,
                                                                          project, selector)))};
          },
          [](const Ctx& c, const Json&, const Json& output) -> Result<Reply> {
            return Reply{202, ExternalIpView(FP_TRY(FP_TRY(c.Compute())->IpOfSagaOutput(output)))};
          }));
  r.Add("DELETE", "/v1/instances/{instance}/external-ips/ephemeral",
        Endpoint(
            [](const Ctx& c) -> Result<Reply> {
              auto instance = FP_TRY(c.PathNameOrId("instance"));
              auto project = FP_TRY(c.query.OptNameOrId("project"));
              auto version = FP_TRY(c.query.OptIpVersion("ip_version"));
              FP_CHECK_OK(
                  FP_TRY(c.Compute())->DetachEphemeral(c.Saga(204), instance, project, version));
              return Reply{204, nullptr};
            },
            NoContentFromSaga));
}

}  // namespace fp::api
