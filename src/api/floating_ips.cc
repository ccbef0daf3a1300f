// Floating IPs: /v1/floating-ips, their attach and detach.

#include "api/bodies.h"
#include "api/endpoint.h"
#include "api/pagination.h"
#include "api/views.h"

namespace fp::api {

namespace {

std::pair<std::string, std::string> FipKeys(const model::ExternalIp& e) {
  return {e.name.value_or(""), e.id.ToString()};
}

Result<model::AddressRequest> ParseAddressAllocator(const Fields& body) {
  model::AddressRequest req;
  if (body.IsNullOrAbsent("address_allocator")) return req;
  Fields f = FP_TRY(body.Object("address_allocator"));
  std::string type = FP_TRY(f.String("type"));
  if (type == "explicit") {
    req.explicit_ip = FP_TRY(f.Ip("ip"));
  } else if (type == "auto") {
    if (!f.IsNullOrAbsent("pool_selector")) {
      req.selector = FP_TRY(ParsePoolSelector(FP_TRY(f.Object("pool_selector"))));
    }
  } else {
    return Fail(BodyError(f.FieldPath("type"), "expected \"explicit\" or \"auto\""));
  }
  return req;
}

void AddAttachRoutes(Routes& r) {
  // Attach and detach answer with the row their saga's last node committed.
  auto floating_ip_from_saga = [](const Ctx& c, const Json&, const Json& output) -> Result<Reply> {
    return Reply{202, FloatingIpView(FP_TRY(FP_TRY(c.Compute())->IpOfSagaOutput(output)))};
  };
  r.Add(
      "POST", "/v1/floating-ips/{floating_ip}/attach",
      Endpoint(
          [](const Ctx& c) -> Result<Reply> {
            auto fip = FP_TRY(c.PathNameOrId("floating_ip"));
            auto project = FP_TRY(c.query.OptNameOrId("project"));
            Json body = FP_TRY(c.Body());
            Fields f(body, "");
            std::string kind = FP_TRY(f.String("kind"));
            if (kind != "instance") return Fail(BodyError("kind", "expected \"instance\""));
            NameOrId parent = FP_TRY(f.NameOrIdField("parent"));
            // Additive: move the IP from the instance it is attached to, in one saga.
            bool move = FP_TRY(f.OptBool("allow_reassociation")).value_or(false);
            return Reply{
                202,
                FloatingIpView(FP_TRY(
                    FP_TRY(c.Compute())->AttachFloating(c.Saga(202), fip, project, parent, move)))};
          },
          floating_ip_from_saga));
  r.Add("POST", "/v1/floating-ips/{floating_ip}/detach",
        Endpoint(
            [](const Ctx& c) -> Result<Reply> {
              auto fip = FP_TRY(c.PathNameOrId("floating_ip"));
              auto project = FP_TRY(c.query.OptNameOrId("project"));
              return Reply{
                  202, FloatingIpView(
                           FP_TRY(FP_TRY(c.Compute())->DetachFloating(c.Saga(202), fip, project)))};
            },
            floating_ip_from_saga));
}

}  // namespace

void AddFloatingIpRoutes(Routes& r) {
  r.Add("GET", "/v1/floating-ips", [](const Ctx& c) -> Result<Reply> {
    auto page = FP_TRY(ParsePage(c.query));
    NameOrId project = FP_TRY(ListProject(c.query));
    auto items = FP_TRY(c.app.floating_ips.List(c.actor, project, page));
    std::string scope;
    if (!items.empty() && items.front().project_id) scope = items.front().project_id->ToString();
    return Reply{200, PageBody<model::ExternalIp>(items, page, &FloatingIpView, FipKeys, scope)};
  });
  r.Add("POST", "/v1/floating-ips", [](const Ctx& c) -> Result<Reply> {
    auto project = FP_TRY(c.query.RequiredNameOrId("project"));
    Json body = FP_TRY(c.Body());
    Fields f(body, "");
    std::string name = FP_TRY(f.NameField("name")).str();
    std::string description = FP_TRY(f.Description("description"));
    auto address = FP_TRY(ParseAddressAllocator(f));
    return Reply{201, FloatingIpView(FP_TRY(c.app.floating_ips.Create(
                          c.Effect<model::ExternalIp>(201, &FloatingIpView), project, name,
                          description, address)))};
  });
  r.Add("GET", "/v1/floating-ips/{floating_ip}", [](const Ctx& c) -> Result<Reply> {
    auto fip = FP_TRY(c.PathNameOrId("floating_ip"));
    auto project = FP_TRY(c.query.OptNameOrId("project"));
    return Reply{200, FloatingIpView(FP_TRY(c.app.floating_ips.View(c.actor, fip, project)))};
  });
  r.Add("PUT", "/v1/floating-ips/{floating_ip}", [](const Ctx& c) -> Result<Reply> {
    auto fip = FP_TRY(c.PathNameOrId("floating_ip"));
    auto project = FP_TRY(c.query.OptNameOrId("project"));
    auto update = FP_TRY(ParseIdentityUpdate(FP_TRY(c.Body())));
    return Reply{200,
                 FloatingIpView(FP_TRY(c.app.floating_ips.Update(
                     c.Effect<model::ExternalIp>(200, &FloatingIpView), fip, project, update)))};
  });
  r.Add("DELETE", "/v1/floating-ips/{floating_ip}", [](const Ctx& c) -> Result<Reply> {
    auto fip = FP_TRY(c.PathNameOrId("floating_ip"));
    auto project = FP_TRY(c.query.OptNameOrId("project"));
    FP_CHECK_OK(c.app.floating_ips.Delete(c.NoContent(), fip, project));
    return Reply{204, nullptr};
  });
  // floatplane's extension (issue 25): a detached floating IP moves to another project of
  // the silo, keeping its address, id and name. Body: {"project": NameOrId}.
  r.Add("POST", "/v1/system/floating-ips/{floating_ip}/transfer",
        [](const Ctx& c) -> Result<Reply> {
          auto fip = FP_TRY(c.PathNameOrId("floating_ip"));
          auto project = FP_TRY(c.query.OptNameOrId("project"));
          Json body = FP_TRY(c.Body());
          NameOrId to = FP_TRY(Fields(body, "").NameOrIdField("project"));
          return Reply{200,
                       FloatingIpView(FP_TRY(c.app.floating_ips.Transfer(
                           c.Effect<model::ExternalIp>(200, &FloatingIpView), fip, project, to)))};
        });
  AddAttachRoutes(r);
}

}  // namespace fp::api
