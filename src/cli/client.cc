#include "cli/client.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>

#include "cli/credentials.h"
#include "common/uuid.h"

namespace fp::cli {

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string NoTrailingSlash(std::string url) {
  while (!url.empty() && url.back() == '/') url.pop_back();
  return url;
}

// The Oxide SDK's order (oxide.rs sdk/src/auth.rs): --profile, then OXIDE_HOST with
// OXIDE_TOKEN, then a profile for OXIDE_HOST, OXIDE_PROFILE, config.toml's default-profile.
CliResult<Target> ResolveTarget(const Globals& g) {
  const std::string env_host = Env("OXIDE_HOST");
  const std::string env_token = Env("OXIDE_TOKEN");
  const std::string env_profile = Env("OXIDE_PROFILE");
  if (!env_host.empty() && !env_profile.empty()) {
    return Fail(
        CredentialsError("Both $OXIDE_HOST and $OXIDE_PROFILE are set, only one may be used"));
  }
  ConfigDir dir(g.config_dir);
  auto profiles = [&]() -> CliResult<std::vector<Profile>> {
    std::vector<Profile> all = FP_TRY(dir.Profiles());
    if (all.empty() && access(dir.credentials_path().c_str(), F_OK) != 0) {
      return Fail(CredentialsError(
          "no authenticated hosts; use floatplane auth login to authenticate (or set "
          "OXIDE_HOST and OXIDE_TOKEN)"));
    }
    return all;
  };
  auto by_name = [&](const std::vector<Profile>& all,
                     const std::string& name) -> CliResult<Target> {
    for (const Profile& p : all) {
      if (p.name == name) return Target{NoTrailingSlash(p.host), p.token, p.name};
    }
    return Fail(CredentialsError(
        fmt::format("Profile information not present in {} for {}", dir.credentials_path(), name)));
  };
  if (!g.profile.empty()) return by_name(FP_TRY(profiles()), g.profile);
  if (!env_token.empty()) {
    if (env_host.empty()) {
      return Fail(CredentialsError("$OXIDE_TOKEN is set but $OXIDE_HOST is not"));
    }
    return Target{NoTrailingSlash(env_host), env_token, ""};
  }
  std::vector<Profile> all = FP_TRY(profiles());
  if (!env_host.empty()) {
    for (const Profile& p : all) {
      if (p.host == env_host) return Target{NoTrailingSlash(p.host), p.token, p.name};
    }
    return Fail(CredentialsError(fmt::format(
        "$OXIDE_HOST is set, but {} has no corresponding token. Login without $OXIDE_HOST set "
        "or set $OXIDE_TOKEN.",
        env_host)));
  }
  if (!env_profile.empty()) return by_name(all, env_profile);
  auto fallback = FP_TRY(dir.DefaultProfile());
  if (!fallback) return Fail(CredentialsError("No profile specified and no default profile"));
  return by_name(all, *fallback);
}

}  // namespace

CLI::Validator WholeNumber(int64_t max) {
  return CLI::Validator(
      [max](std::string& text) -> std::string {
        int64_t value = 0;
        const char* end = text.data() + text.size();
        auto [at, ec] = std::from_chars(text.data(), end, value);
        if (ec != std::errc() || at != end || value < 1 || value > max) {
          return fmt::format("expected a whole number from 1 to {}, not \"{}\"", max, text);
        }
        return "";
      },
      "");
}

CLI::Validator PositiveSeconds() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        double value = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || !(value > 0) || value > 86400) {
          return fmt::format("expected seconds, a number above 0 (e.g. 15 or 2.5), not \"{}\"",
                             text);
        }
        return "";
      },
      "");
}

CliResult<OutputFormat> Session::format() {
  std::string text = globals_.format;
  if (text.empty()) text = Env("FLOATPLANE_FORMAT");
  if (text.empty()) {
    ConfigDir dir(globals_.config_dir);
    text = FP_TRY(dir.DefaultFormat()).value_or("json");
  }
  OutputFormat format = FP_TRY(ParseOutputFormat(text));
  format.header = !globals_.no_header;
  return format;
}

CliResult<Target> Session::target() { return ResolveTarget(globals_); }

const std::string& Session::idempotency_key() {
  if (key_.empty()) {
    key_ =
        globals_.idempotency_key.empty() ? random_.NewUuid().ToString() : globals_.idempotency_key;
  }
  return key_;
}

CliResult<Api*> Session::api(std::optional<MonoTime> retry_until) {
  if (!api_) {
    Target t = FP_TRY(target());
    TransportOptions options;
    options.base_url = t.host;
    options.timeout = std::chrono::milliseconds(static_cast<int64_t>(globals_.timeout_s * 1000));
    options.cacert = globals_.cacert;
    options.insecure = globals_.insecure;
    options.resolve = globals_.resolve;
    options.debug = globals_.debug;
    transport_ = std::make_unique<Transport>(std::move(options));
    ApiOptions api_options;
    api_options.token = t.token;
    api_options.idempotency_key = idempotency_key();
    api_options.retry_until = retry_until;
    api_options.on_retry = [this](const std::string& why) {
      Note(fmt::format("retrying: {}", why));
    };
    api_ = std::make_unique<Api>(*transport_, std::move(api_options), clock_, random_);
  }
  return api_.get();
}

void Session::Note(const std::string& line) const {
  if (!globals_.quiet) std::fprintf(stderr, "%s\n", line.c_str());
}

Commands::Commands(CLI::App& app, const Clock& clock, Random& random)
    : clock_(clock), random_(random), app_(app) {
  auto* g = &globals_;
  const char* kGroup = "Client options";
  app.add_option("--profile", g->profile, "Configuration profile to use for commands")
      ->group(kGroup);
  app.add_option("--config-dir", g->config_dir,
                 "Directory of credentials.toml and config.toml (default: ~/.config/oxide, "
                 "shared with the oxide CLI)")
      ->group(kGroup);
  app.add_option("--cacert", g->cacert, "A PEM file of CA certificates to trust")->group(kGroup);
  app.add_flag("--insecure", g->insecure, "Do not verify the server's TLS certificate")
      ->group(kGroup);
  app.add_option("--resolve", g->resolve, "HOST:PORT:ADDR: connect to ADDR for HOST:PORT")
      ->group(kGroup);
  app.add_option("--timeout", g->timeout_s, "Seconds a request may take (default 15)")
      ->check(PositiveSeconds())
      ->group(kGroup);
  app.add_flag("--debug", g->debug, "Show each request and answer on stderr (token hidden)")
      ->group(kGroup);
  app.add_option("--format", g->format,
                 "json (default), table, or table:COLUMN,... [env: FLOATPLANE_FORMAT; config.toml "
                 "`format`]")
      ->group(kGroup);
  app.add_flag("--no-header", g->no_header, "Tables without their header line")->group(kGroup);
  app.add_flag("-q,--quiet", g->quiet, "No confirmations or progress on stderr")->group(kGroup);
  app.add_option("--idempotency-key", g->idempotency_key,
                 "The Idempotency-Key of this command's mutating request (default: a random one; "
                 "the command's own retries reuse it)")
      ->group(kGroup);
  app.footer(kExitCodesHelp);
}

CLI::App* Commands::Group(CLI::App* parent, const std::string& name, const std::string& about) {
  CLI::App* group = parent->add_subcommand(name, about);
  group->require_subcommand(1);
  group->fallthrough();
  return group;
}

CLI::App* Commands::Leaf(CLI::App* parent, const std::string& name, const std::string& about,
                         const std::string& operation, const std::string& example, Action action) {
  CLI::App* leaf = parent->add_subcommand(name, about);
  leaf->fallthrough();
  std::string footer;
  if (!operation.empty()) footer += "API operation: " + operation + "\n";
  if (!example.empty()) footer += "Example:\n  " + example + "\n";
  footer += kExitCodesHelp;
  leaf->footer(footer);
  leaves_.emplace_back(leaf, std::move(action));
  operations_[leaf] = operation;
  return leaf;
}

bool Commands::Parsed() const {
  for (const auto& [leaf, action] : leaves_) {
    if (leaf->parsed()) return true;
  }
  return false;
}

int Commands::Run() {
  signal(SIGPIPE, SIG_IGN);
  for (auto& [leaf, action] : leaves_) {
    if (!leaf->parsed()) continue;
    Session session(globals_, clock_, random_);
    if (auto warning = ConfigDir(globals_.config_dir).PermissionWarning()) {
      std::fprintf(stderr, "%s\n", warning->c_str());
    }
    CliStatus done;
    try {
      done = action(session);
    } catch (const std::exception& e) {
      // A bug or an answer of an unexpected shape: one line and exit 1, never an abort.
      done = tl::unexpected(Failure{Exit::kApiError, std::string("unexpected: ") + e.what()});
    }
    std::fflush(stdout);
    if (done) return 0;
    std::fprintf(stderr, "error: %s\n", done.error().message.c_str());
    return static_cast<int>(done.error().exit);
  }
  return static_cast<int>(Exit::kUsage);
}

namespace {

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::vector<const CLI::App*> Children(const CLI::App* app) {
  std::vector<const CLI::App*> out;
  for (const CLI::App* sub : app->get_subcommands({})) {
    if (sub->get_name().rfind("__", 0) != 0) out.push_back(sub);
  }
  return out;
}

}  // namespace

std::string DescribeUsageError(const CLI::App& root, int argc, char** argv,
                               const CLI::ParseError& e) {
  // Walk the words as the tree does: the group reached, and the first word it does not know.
  const CLI::App* node = &root;
  std::string unknown;
  std::string unknown_flag;  // the first --flag no command on the path knows
  for (int i = 1; i < argc; ++i) {
    std::string word = argv[i];
    if (word == "--") break;
    if (word.rfind('-', 0) == 0) {
      // Skip an option's value ("--profile lab").
      const CLI::Option* o = nullptr;
      for (const CLI::App* a = node; a != nullptr && o == nullptr; a = a->get_parent()) {
        o = a->get_option_no_throw(word.substr(0, word.find('=')));
      }
      if (o != nullptr && word.find('=') == std::string::npos && o->get_items_expected_max() > 0) {
        ++i;
      }
      if (o == nullptr && word.rfind("--", 0) == 0 && word.size() > 2 && unknown_flag.empty()) {
        unknown_flag = word.substr(0, word.find('='));
      }
      continue;
    }
    const CLI::App* next = nullptr;
    for (const CLI::App* sub : Children(node)) {
      if (sub->get_name() == word) next = sub;
    }
    if (next == nullptr) {
      if (!Children(node).empty()) unknown = word;
      break;
    }
    node = next;
  }
  std::vector<const CLI::App*> children = Children(node);
  std::string path;
  for (const CLI::App* a = node; a != nullptr && a != &root; a = a->get_parent()) {
    path = " " + a->get_name() + path;
  }
  if (unknown.empty() && !unknown_flag.empty()) {
    // A misspelt flag, which CLI11 would report as another one missing: name it, and the
    // closest flag the command has.
    std::string closest;
    size_t best = 3;  // at most two edits away
    for (const CLI::App* a = node; a != nullptr; a = a->get_parent()) {
      for (const CLI::Option* o : a->get_options()) {
        for (const std::string& name : o->get_lnames()) {
          size_t d = EditDistance(unknown_flag.substr(2), name);
          if (d < best) {
            best = d;
            closest = "--" + name;
          }
        }
      }
    }
    std::string out = fmt::format("error: floatplane{} has no flag \"{}\"", path, unknown_flag);
    if (!closest.empty()) out += fmt::format("; did you mean \"{}\"?", closest);
    return out + "\nRun with --help for more information.\n";
  }
  if (children.empty() || node == &root) {
    if (unknown.empty())
      return fmt::format("error: {}\nRun with --help for more information.\n", e.what());
  }
  std::string out;
  if (!unknown.empty()) {
    const CLI::App* closest = nullptr;
    size_t best = 3;  // at most two edits away
    for (const CLI::App* sub : children) {
      size_t d = EditDistance(unknown, sub->get_name());
      if (d < best) {
        best = d;
        closest = sub;
      }
    }
    out = fmt::format("error: floatplane{} has no command \"{}\"", path, unknown);
    if (closest != nullptr) out += fmt::format("; did you mean \"{}\"?", closest->get_name());
    out += "\n";
  } else {
    out = fmt::format("error: floatplane{} needs one of its commands\n", path);
  }
  out += fmt::format("\nCommands of floatplane{}:\n", path);
  size_t width = 0;
  for (const CLI::App* sub : children) width = std::max(width, sub->get_name().size());
  for (const CLI::App* sub : children) {
    out += fmt::format("  {:<{}}  {}\n", sub->get_name(), width, sub->get_description());
  }
  return out;
}

}  // namespace fp::cli
