// Projects of the actor's silo: /v1/projects.

#include "api/bodies.h"
#include "api/endpoint.h"
#include "api/pagination.h"
#include "api/views.h"

namespace fp::api {

namespace {

std::pair<std::string, std::string> ProjectKeys(const model::Project& p) {
  return {p.name, p.id.ToString()};
}

}  // namespace

void AddProjectRoutes(Routes& r) {
  r.Add("GET", "/v1/projects", [](const Ctx& c) -> Result<Reply> {
    auto page = FP_TRY(ParsePage(c.query));
    auto items = FP_TRY(c.app.projects.List(c.actor, page));
    return Reply{200, PageBody<model::Project>(items, page, &ProjectView, ProjectKeys)};
  });
  r.Add("POST", "/v1/projects", [](const Ctx& c) -> Result<Reply> {
    Json body = FP_TRY(c.Body());
    Fields f(body, "");
    std::string name = FP_TRY(f.NameField("name")).str();
    std::string description = FP_TRY(f.Description("description"));
    return Reply{201, ProjectView(FP_TRY(c.app.projects.Create(
                          c.Effect<model::Project>(201, &ProjectView), name, description)))};
  });
  r.Add("GET", "/v1/projects/{project}", [](const Ctx& c) -> Result<Reply> {
    return Reply{
        200, ProjectView(FP_TRY(c.app.projects.View(c.actor, FP_TRY(c.PathNameOrId("project")))))};
  });
  r.Add("PUT", "/v1/projects/{project}", [](const Ctx& c) -> Result<Reply> {
    auto selector = FP_TRY(c.PathNameOrId("project"));
    auto update = FP_TRY(ParseIdentityUpdate(FP_TRY(c.Body())));
    return Reply{200, ProjectView(FP_TRY(c.app.projects.Update(
                          c.Effect<model::Project>(200, &ProjectView), selector, update)))};
  });
  r.Add("DELETE", "/v1/projects/{project}", [](const Ctx& c) -> Result<Reply> {
    FP_CHECK_OK(c.app.projects.Delete(c.NoContent(), FP_TRY(c.PathNameOrId("project"))));
    return Reply{204, nullptr};
  });
}

}  // namespace fp::api
