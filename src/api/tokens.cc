// API tokens (fleet admin; floatplane's extension): /v1/system/tokens.

#include "api/endpoint.h"

namespace fp::api {

void AddTokenRoutes(Routes& r) {
  r.Add("POST", "/v1/system/tokens", [](const Ctx& c) -> Result<Reply> {
    Json body = FP_TRY(c.Body());
    Fields f(body, "");
    NameOrId silo = FP_TRY(f.NameOrIdField("silo"));
    std::string role_text = FP_TRY(f.String("role"));
    auto role = model::ParseRole(role_text);
    if (!role) {
      return Fail(BodyError("role",
                            "expected one of \"fleet_admin\", \"silo_admin\", "
                            "\"silo_collaborator\", \"silo_viewer\""));
    }
    std::string name = FP_TRY(f.String("name"));
    if (name.empty() || name.size() > 255) {
      return Fail(BodyError("name", "must be between 1 and 255 characters"));
    }
    auto issued = FP_TRY(c.app.tokens.Create(c.actor, silo, *role, name));
    return Reply{201, Json{{"id", issued.token.id.ToString()}, {"token", issued.secret}}};
  });
  r.Add("DELETE", "/v1/system/tokens/{id}", [](const Ctx& c) -> Result<Reply> {
    AnswerNoContent(c);
    FP_CHECK_OK(c.app.tokens.Revoke(c.actor, FP_TRY(c.PathUuid("id"))));
    return Reply{204, nullptr};
  });
}

}  // namespace fp::api
