// The people of a silo: `silo idp local user create|set-password|delete` (Oxide's local
// identity provider, under the `silo` group) and `user list`.

#include <fmt/format.h>

#include "cli/command_kit.h"

namespace fp::cli {

namespace {

const std::vector<std::string> kUserFields = {"display_name", "id", "silo_id"};

// How a local user's password is given: a file or stdin, or none (the user cannot log in).
struct PasswordInput {
  std::string file;
  bool from_stdin = false;
  bool login_disallowed = false;
};

void AddPasswordFlags(CLI::App* leaf, PasswordInput& p) {
  CLI::Option* file = leaf->add_option(
      "--password-file", p.file,
      "A file holding the password (8 to 512 bytes; a trailing newline is dropped)");
  CLI::Option* in = leaf->add_flag("--password-stdin", p.from_stdin, "Read the password from stdin")
                        ->excludes(file);
  leaf->add_flag("--login-disallowed", p.login_disallowed,
                 "No password: the user cannot log in (and any sessions end)")
      ->excludes(file)
      ->excludes(in);
}

// Oxide's UserPassword.
CliResult<nlohmann::json> PasswordBody(const PasswordInput& p) {
  if (p.login_disallowed) return nlohmann::json{{"mode", "login_disallowed"}};
  std::string password =
      FP_TRY(ReadSecret(p.file, p.from_stdin, "--password-file", "--password-stdin", "password"));
  if (password.empty()) return Fail(UsageError("the password is empty"));
  return nlohmann::json{{"mode", "password"}, {"value", password}};
}

}  // namespace

void AddUserCommands(Commands& c, CLI::App* silo_group) {
  CLI::App* idp = c.Group(silo_group, "idp", "The silo's identity providers");
  CLI::App* local = c.Group(idp, "local", "The silo's own users, with passwords");
  CLI::App* user = c.Group(local, "user", "Local users: create, set a password, delete");
  struct Create {
    std::string silo, external_id, role;
    PasswordInput password;
  };
  auto* create = c.Keep<Create>();
  CLI::App* leaf = c.Leaf(
      user, "create", "Create a local user with a password and a role", "local_idp_user_create",
      "floatplane silo idp local user create --silo default --external-id alice --role "
      "silo_collaborator --password-file alice.pw",
      [create](Session& s) -> CliStatus {
        FP_CHECK_OK(CheckNameOrId("--silo", create->silo));
        FP_CHECK_OK(CheckName("--external-id", create->external_id));
        // (Not FP_TRY inside the braces: a return out of a half-built initializer list leaks
        // what it built, as LeakSanitizer saw.)
        nlohmann::json password = FP_TRY(PasswordBody(create->password));
        nlohmann::json body{{"external_id", create->external_id}, {"password", password}};
        if (!create->role.empty()) body["role"] = create->role;
        Api* api = FP_TRY(s.api());
        return PrintOne(s,
                        FP_TRY(api->Mutate("POST", "/v1/system/identity-providers/local/users",
                                           body, {{"silo", create->silo}})),
                        FieldColumns(kUserFields), {"display_name", "id", "silo_id"});
      });
  leaf->add_option("--silo", create->silo, "The silo (name or id)")->required();
  leaf->add_option("--external-id", create->external_id, "The user's name, to log in with")
      ->required();
  leaf->add_option("--role", create->role,
                   "The user's role in the silo (floatplane's extension; default silo_viewer; "
                   "fleet_admin only by a fleet admin)")
      ->check(CLI::IsMember({"fleet_admin", "silo_admin", "silo_collaborator", "silo_viewer"}));
  AddPasswordFlags(leaf, create->password);

  struct SetPassword {
    std::string silo, user_id;
    PasswordInput password;
  };
  auto* set = c.Keep<SetPassword>();
  leaf = c.Leaf(user, "set-password",
                "Set or remove a local user's password (the user's sessions end)",
                "local_idp_user_set_password",
                "floatplane silo idp local user set-password --silo default --user-id ID "
                "--password-stdin < new.pw",
                [set](Session& s) -> CliStatus {
                  FP_CHECK_OK(CheckNameOrId("--silo", set->silo));
                  nlohmann::json body = FP_TRY(PasswordBody(set->password));
                  Api* api = FP_TRY(s.api());
                  FP_TRY(api->Mutate("POST",
                                     "/v1/system/identity-providers/local/users/" +
                                         Segment(set->user_id) + "/set-password",
                                     body, {{"silo", set->silo}}));
                  s.Note(fmt::format("Password of user {} {}", set->user_id,
                                     set->password.login_disallowed ? "removed" : "set"));
                  return {};
                });
  leaf->add_option("--silo", set->silo, "The silo (name or id)")->required();
  leaf->add_option("--user-id", set->user_id, "The user's id")->required();
  AddPasswordFlags(leaf, set->password);

  struct Delete {
    std::string silo, user_id;
  };
  auto* del = c.Keep<Delete>();
  leaf = c.Leaf(
      user, "delete", "Delete a local user (the user's sessions end)", "local_idp_user_delete",
      "floatplane silo idp local user delete --silo default --user-id ID",
      [del](Session& s) -> CliStatus {
        FP_CHECK_OK(CheckNameOrId("--silo", del->silo));
        Api* api = FP_TRY(s.api());
        FP_TRY(api->Mutate("DELETE",
                           "/v1/system/identity-providers/local/users/" + Segment(del->user_id),
                           nullptr, {{"silo", del->silo}}));
        s.Note(fmt::format("User {} deleted", del->user_id));
        return {};
      });
  leaf->add_option("--silo", del->silo, "The silo (name or id)")->required();
  leaf->add_option("--user-id", del->user_id, "The user's id")->required();

  CLI::App* users = c.Group(&c.root(), "user", "The users of your silo");
  auto* list = c.Keep<ListFlags>();
  leaf = c.Leaf(users, "list", "List the users of your silo", "user_list",
                "floatplane user list --format table", [list](Session& s) -> CliStatus {
                  return RunList(s, "/v1/users", {}, *list, FieldColumns(kUserFields),
                                 {"display_name", "id", "silo_id"});
                });
  AddListFlags(leaf, *list, {});
}

}  // namespace fp::cli
