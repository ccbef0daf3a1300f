// `auth login|logout|status`: the profiles in credentials.toml (cli/credentials.h), each
// checked against its host with GET /v1/me.

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/command_kit.h"
#include "cli/credentials.h"

namespace fp::cli {

namespace {

// "example.com:8888" -> "https://example.com:8888"; http:// must be explicit (the oxide CLI's
// rule for --host); path, query and credentials are dropped. UsageError for another scheme.
CliResult<std::string> NormalizeHost(const std::string& text) {
  std::string rest = text;
  std::string scheme = "https";
  if (size_t sep = rest.find("://"); sep != std::string::npos) {
    scheme = rest.substr(0, sep);
    std::transform(scheme.begin(), scheme.end(), scheme.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    rest = rest.substr(sep + 3);
    if (scheme != "http" && scheme != "https") {
      return Fail(UsageError(fmt::format("--host \"{}\": non-http(s) scheme given", text)));
    }
  }
  rest = rest.substr(0, rest.find_first_of("/?#"));
  if (size_t at = rest.rfind('@'); at != std::string::npos) rest = rest.substr(at + 1);
  std::transform(rest.begin(), rest.end(), rest.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (rest.empty()) return Fail(UsageError(fmt::format("--host \"{}\": no host in it", text)));
  return scheme + "://" + rest;
}

// What `auth status` says of a failed GET /v1/me (the oxide CLI's wording).
std::string StatusOf(const Failure& f) {
  if (f.exit == Exit::kUnreachable) {
    if (f.message.find("no answer within") != std::string::npos) return "Request timed out";
    size_t colon = f.message.rfind(": ");
    return "Failed to connect to server: " +
           (colon == std::string::npos ? f.message : f.message.substr(colon + 2));
  }
  std::string message = f.message;
  if (size_t paren = message.rfind(" ("); paren != std::string::npos) message.resize(paren);
  return "Server responded with an error message: " + message;
}

CliResult<nlohmann::json> CurrentUser(Session& s, const std::string& host,
                                      const std::string& token) {
  const Globals& g = s.globals();
  TransportOptions options;
  options.base_url = host;
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(g.timeout_s * 1000));
  options.cacert = g.cacert;
  options.insecure = g.insecure;
  options.resolve = g.resolve;
  options.debug = g.debug;
  Transport transport(options);
  Api api(transport, ApiOptions{token, "", std::nullopt, nullptr}, s.clock(), s.random());
  nlohmann::json me = FP_TRY(api.Get("/v1/me"));
  if (!me.is_object())
    return Fail(Failure{Exit::kApiError, host + ": GET /v1/me did not answer a user"});
  return me;
}

}  // namespace

void AddAuthCommands(Commands& c) {
  CLI::App* auth = c.Group(&c.root(), "auth", "Log in and out: the profiles in credentials.toml");

  struct Login {
    std::string host, token_file;
    bool token_stdin = false;
  };
  auto* login = c.Keep<Login>();
  CLI::App* leaf =
      c.Leaf(auth, "login", "Save a token for a host as a profile (checked with GET /v1/me)",
             "current_user_view",
             "floatplane auth login --host http://127.0.0.1:12220 --token-file "
             ".floatplane-dev/admin-token",
             [login](Session& s) -> CliStatus {
               std::string host = FP_TRY(NormalizeHost(login->host));
               std::string token = FP_TRY(ReadSecret(login->token_file, login->token_stdin,
                                                     "--token-file", "--token-stdin", "token"));
               if (token.empty()) return Fail(CredentialsError("the token is empty"));
               nlohmann::json me = FP_TRY(CurrentUser(s, host, token));
               ConfigDir dir(s.globals().config_dir);
               std::vector<Profile> profiles = FP_TRY(dir.Profiles());
               std::string name = s.globals().profile;
               if (name.empty()) {
                 const std::string silo = me.value("silo_name", "default");
                 name = silo;
                 for (int n = 2; std::any_of(profiles.begin(), profiles.end(),
                                             [&](const Profile& p) { return p.name == name; });
                      ++n) {
                   name = silo + std::to_string(n);
                 }
               }
               Profile profile;
               profile.name = name;
               profile.host = host;
               profile.token = token;
               profile.user = me.value("id", "");
               FP_CHECK_OK(dir.SaveProfile(profile));
               const bool had_default = FP_TRY(dir.DefaultProfile()).has_value();
               if (!had_default) FP_CHECK_OK(dir.SetDefaultProfile(name));
               Out(fmt::format("Login successful\n  silo: {} ({})\n  user: {} ({})\n{}\n",
                               me.value("silo_name", ""), me.value("silo_id", ""),
                               me.value("display_name", ""), me.value("id", ""),
                               had_default ? fmt::format("Use --profile '{}'", name)
                                           : fmt::format("Profile '{}' set as the default", name)));
               return {};
             });
  leaf->add_option("-H,--host", login->host,
                   "The server: https://HOST[:PORT] (http:// must be explicit)")
      ->required();
  CLI::Option* file =
      leaf->add_option("--token-file", login->token_file, "A file holding the token");
  leaf->add_flag("--token-stdin", login->token_stdin, "Read the token from stdin")->excludes(file);

  leaf = c.Leaf(auth, "status", "Check every profile's token against its host", "current_user_view",
                "floatplane auth status", [](Session& s) -> CliStatus {
                  const char* env_host = std::getenv("OXIDE_HOST");
                  const char* env_token = std::getenv("OXIDE_TOKEN");
                  if (env_host && env_token && *env_host && *env_token) {
                    auto me = CurrentUser(s, env_host, env_token);
                    Out(me ? fmt::format("Logged in to {} as {}\n", env_host, me->value("id", ""))
                           : fmt::format("{}: {}\n", env_host, StatusOf(me.error())));
                    return {};
                  }
                  ConfigDir dir(s.globals().config_dir);
                  for (const Profile& p : FP_TRY(dir.Profiles())) {
                    auto me = CurrentUser(s, p.host, p.token);
                    Out(fmt::format("Profile \"{}\" ({}) status: {}\n", p.name, p.host,
                                    me ? "Authenticated" : StatusOf(me.error())));
                  }
                  return {};
                });

  struct Logout {
    bool all = false;
    bool force = false;
  };
  auto* logout = c.Keep<Logout>();
  leaf = c.Leaf(auth, "logout", "Remove saved credentials (the token stays valid on the server)",
                "", "floatplane auth logout --profile lab", [logout](Session& s) -> CliStatus {
                  ConfigDir dir(s.globals().config_dir);
                  std::string name = s.globals().profile;
                  if (!logout->all && name.empty()) {
                    auto fallback = FP_TRY(dir.DefaultProfile());
                    if (!fallback)
                      return Fail(CredentialsError("No profile specified and no default profile"));
                    name = *fallback;
                  }
                  if (!logout->force && isatty(STDIN_FILENO) == 1) {
                    std::fprintf(stderr, "Confirm authentication information deletion [y/N]: ");
                    std::string answer;
                    std::getline(std::cin, answer);
                    if (answer != "y" && answer != "Y" && answer != "yes") return {};
                  }
                  const char* kLocalOnly =
                      "(only this machine's copy: the token stays valid until revoked with "
                      "`floatplane system token delete`)";
                  if (logout->all) {
                    FP_CHECK_OK(dir.RemoveAllProfiles());
                    Out(fmt::format("Removed all authentication information {}\n", kLocalOnly));
                    return {};
                  }
                  if (FP_TRY(dir.RemoveProfile(name))) {
                    Out(fmt::format("Removed authentication information for profile \"{}\" {}\n",
                                    name, kLocalOnly));
                  }
                  return {};
                });
  leaf->add_flag("-a,--all", logout->all, "Every profile");
  leaf->add_flag("-f,--force", logout->force,
                 "No confirmation prompt (there is none without a terminal)");
}

}  // namespace fp::cli
