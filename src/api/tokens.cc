// API tokens (fleet admin; floatplane's extension): /v1/system/tokens.

#include "api/endpoint.h"
#include "api/pagination.h"

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
    auto issued = FP_TRY(c.app.tokens.Create(
        // The answer carries the token's secret, which is never stored: nothing to render.
        c.Effect<model::Token>(
            201, +[](const model::Token&) { return Json(); }),
        silo, *role, name));
    return Reply{201, Json{{"id", issued.token.id.ToString()}, {"token", issued.secret}}};
  });
  // Live tokens by id (their secrets are not kept, so never shown); next_page is the last id.
  r.Add("GET", "/v1/system/tokens", [](const Ctx& c) -> Result<Reply> {
    int64_t limit = FP_TRY(ParseLimit(c.query));
    std::optional<Uuid> after = FP_TRY(ParseIdPageToken(c.query));
    auto tokens = FP_TRY(c.app.tokens.List(c.actor, after, limit + 1));
    Json items = Json::array();
    for (size_t i = 0; i < tokens.size() && static_cast<int64_t>(i) < limit; ++i) {
      const auto& t = tokens[i];
      items.push_back(Json{{"id", t.token.id.ToString()},
                           {"name", t.token.name},
                           {"role", std::string(model::ToString(t.token.role))},
                           {"silo_id", t.token.silo_id.ToString()},
                           {"time_created", FormatRfc3339(t.time_created)}});
    }
    Json next = nullptr;
    if (static_cast<int64_t>(tokens.size()) > limit) next = items.back()["id"];
    return Reply{200, Json{{"items", items}, {"next_page", next}}};
  });
  // Oxide's CurrentUser: floatplane has no users, so the token is the user (its name the
  // display name).
  r.Add("GET", "/v1/me", [](const Ctx& c) -> Result<Reply> {
    if (c.actor.user_id) {
      auto me = FP_TRY(c.app.users.CurrentUser(c.actor));
      const model::Role role = me.user.role;
      return Reply{200, Json{{"display_name", me.user.name},
                             {"fleet_viewer", role == model::Role::kFleetAdmin},
                             {"id", me.user.id.ToString()},
                             {"silo_admin",
                              role == model::Role::kFleetAdmin || role == model::Role::kSiloAdmin},
                             {"silo_id", me.user.silo_id.ToString()},
                             {"silo_name", me.silo_name},
                             {"time_created", FormatRfc3339(me.user.time_created)},
                             {"time_modified", FormatRfc3339(me.user.time_modified)}}};
    }
    auto me = FP_TRY(c.app.tokens.CurrentUser(c.actor));
    const model::Role role = me.token.token.role;
    return Reply{200, Json{{"display_name", me.token.token.name},
                           {"fleet_viewer", role == model::Role::kFleetAdmin},
                           {"id", me.token.token.id.ToString()},
                           {"silo_admin",
                            role == model::Role::kFleetAdmin || role == model::Role::kSiloAdmin},
                           {"silo_id", me.token.token.silo_id.ToString()},
                           {"silo_name", me.silo_name},
                           // The user is the token, which never changes once minted.
                           {"time_created", FormatRfc3339(me.token.time_created)},
                           {"time_modified", FormatRfc3339(me.token.time_created)}}};
  });
  r.Add("DELETE", "/v1/system/tokens/{id}", [](const Ctx& c) -> Result<Reply> {
    FP_CHECK_OK(c.app.tokens.Revoke(c.NoContent(), FP_TRY(c.PathUuid("id"))));
    return Reply{204, nullptr};
  });
}

}  // namespace fp::api
