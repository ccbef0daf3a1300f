// Local users and console sessions in Oxide's shape: login and logout, the local identity
// provider's users (/v1/system/identity-providers/local/users), /v1/users, /v1/groups and
// /v1/me/groups (floatplane has no groups: empty pages). /v1/me is in tokens.cc.

#include "api/users.h"

#include <fmt/format.h>

#include "api/endpoint.h"
#include "api/pagination.h"
#include "app/users.h"

namespace fp::api {

namespace {

Json UserView(const model::SiloUser& u) {
  return Json{{"display_name", u.name},
              {"id", u.id.ToString()},
              {"silo_id", u.silo_id.ToString()},
              {"time_created", FormatRfc3339(u.time_created)},
              {"time_modified", FormatRfc3339(u.time_modified)}};
}

// UserPassword: {"mode": "password", "value": ...} or {"mode": "login_disallowed"}; the
// password, or nullopt for the latter.
Result<std::optional<std::string>> PasswordField(const Fields& f, std::string_view path) {
  std::string mode = FP_TRY(f.String("mode"));
  if (mode == "login_disallowed") return std::optional<std::string>();
  if (mode != "password") {
    return Fail(
        BodyError(std::string(path) + "mode", "expected \"password\" or \"login_disallowed\""));
  }
  return std::optional<std::string>(FP_TRY(f.String("value")));
}

Result<model::Role> RoleField(const Fields& f) {
  auto text = FP_TRY(f.OptString("role"));
  if (!text) return model::Role::kSiloViewer;
  auto role = model::ParseRole(*text);
  if (!role) {
    return Fail(BodyError("role",
                          "expected one of \"fleet_admin\", \"silo_admin\", "
                          "\"silo_collaborator\", \"silo_viewer\""));
  }
  return *role;
}

Json EmptyPage() { return Json{{"items", Json::array()}, {"next_page", nullptr}}; }

}  // namespace

std::string SessionCookie(const app::NewSession& session, bool secure) {
  return fmt::format("{}={}; Path=/; Max-Age={}; HttpOnly; SameSite=Strict{}", kSessionCookie,
                     session.token, session.max_age.count(), secure ? "; Secure" : "");
}

std::string ExpiredSessionCookie(bool secure) {
  return fmt::format("{}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict{}", kSessionCookie,
                     secure ? "; Secure" : "");
}

std::optional<std::string> CookieValue(const HttpRequest& req, std::string_view name) {
  for (const auto& [header, value] : req.headers) {
    if (header != "cookie") continue;
    std::string_view rest = value;
    while (!rest.empty()) {
      size_t end = rest.find(';');
      std::string_view pair = rest.substr(0, end);
      rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
      while (!pair.empty() && pair.front() == ' ') pair.remove_prefix(1);
      size_t eq = pair.find('=');
      if (eq != std::string_view::npos && pair.substr(0, eq) == name) {
        return std::string(pair.substr(eq + 1));
      }
    }
  }
  return std::nullopt;
}

void AddUserRoutes(Routes& r) {
  // Public (routes.cc runs them without authentication).
  r.Add("POST", "/v1/login/{silo_name}/local", [](const Ctx& c) -> Result<Reply> {
    auto silo = Name::Parse(c.params.at("silo_name"));
    if (!silo) {
      return Fail(Error::InvalidRequest(
          fmt::format("bad path parameter \"silo_name\": {}", silo.error().message())));
    }
    Json body = FP_TRY(c.Body());
    Fields f(body, "");
    std::string username = FP_TRY(f.String("username"));
    std::string password = FP_TRY(f.String("password"));
    // Failures count per client as the server bounds its connections (an IPv6 client: its
    // /64, which one host commonly holds whole).
    const std::string& client = c.req.client_key.empty() ? c.req.source_address : c.req.client_key;
    auto session = FP_TRY(c.app.users.Login(c.NoContent(), *silo, username, password, client));
    return Reply{204, nullptr, {{"set-cookie", SessionCookie(session, c.req.tls)}}};
  });
  // floatplane's extension (CON-3): the bearer token traded for a session cookie.
  r.Add("POST", "/v1/login/token", [](const Ctx& c) -> Result<Reply> {
    auto session = FP_TRY(c.app.users.LoginWithToken(c.NoContent()));
    return Reply{204, nullptr, {{"set-cookie", SessionCookie(session, c.req.tls)}}};
  });
  r.Add("POST", "/v1/logout", [](const Ctx& c) -> Result<Reply> {
    if (auto token = CookieValue(c.req, kSessionCookie); token && !token->empty()) {
      FP_CHECK_OK(c.app.users.Logout(c.NoContent(), *token));
    }
    return Reply{204, nullptr, {{"set-cookie", ExpiredSessionCookie(c.req.tls)}}};
  });

  r.Add("POST", "/v1/system/identity-providers/local/users", [](const Ctx& c) -> Result<Reply> {
    NameOrId silo = FP_TRY(c.query.RequiredNameOrId("silo"));
    Json body = FP_TRY(c.Body());
    Fields f(body, "");
    Name name = FP_TRY(f.NameField("external_id"));
    Fields password_fields = FP_TRY(f.Object("password"));
    auto password = FP_TRY(PasswordField(password_fields, "password."));
    model::Role role = FP_TRY(RoleField(f));
    auto user = FP_TRY(c.app.users.Create(c.Effect<model::SiloUser>(201, UserView), silo,
                                          name.str(), role, password));
    return Reply{201, UserView(user)};
  });
  r.Add("POST", "/v1/system/identity-providers/local/users/{user_id}/set-password",
        [](const Ctx& c) -> Result<Reply> {
          NameOrId silo = FP_TRY(c.query.RequiredNameOrId("silo"));
          Uuid user = FP_TRY(c.PathUuid("user_id"));
          Json body = FP_TRY(c.Body());
          auto password = FP_TRY(PasswordField(Fields(body, ""), ""));
          FP_CHECK_OK(c.app.users.SetPassword(c.NoContent(), silo, user, password));
          return Reply{204, nullptr};
        });
  r.Add("DELETE", "/v1/system/identity-providers/local/users/{user_id}",
        [](const Ctx& c) -> Result<Reply> {
          NameOrId silo = FP_TRY(c.query.RequiredNameOrId("silo"));
          FP_CHECK_OK(c.app.users.Delete(c.NoContent(), silo, FP_TRY(c.PathUuid("user_id"))));
          return Reply{204, nullptr};
        });
  r.Add("GET", "/v1/users", [](const Ctx& c) -> Result<Reply> {
    if (c.query.Get("group")) return Reply{200, EmptyPage()};  // no groups: no members
    int64_t limit = FP_TRY(ParseLimit(c.query));
    std::optional<Uuid> after = FP_TRY(ParseIdPageToken(c.query));
    auto users = FP_TRY(c.app.users.List(c.actor, after, limit + 1));
    Json items = Json::array();
    for (size_t i = 0; i < users.size() && static_cast<int64_t>(i) < limit; ++i) {
      items.push_back(UserView(users[i]));
    }
    Json next = nullptr;
    if (static_cast<int64_t>(users.size()) > limit) next = items.back()["id"];
    return Reply{200, Json{{"items", items}, {"next_page", next}}};
  });
  r.Add("GET", "/v1/groups", [](const Ctx&) -> Result<Reply> { return Reply{200, EmptyPage()}; });
  r.Add("GET", "/v1/me/groups", [](const Ctx&) -> Result<Reply> {
    return Reply{200, EmptyPage()};
  });
}

}  // namespace fp::api
