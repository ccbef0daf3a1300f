// The client's own commands: env, api, ping, version, docs (completion in completion.cc, auth in
// commands_auth.cc).

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/command_kit.h"
#include "common/version.h"

namespace fp::cli {

namespace {

void AddEnv(Commands& c) {
  auto* argv = c.Keep<std::vector<std::string>>();
  CLI::App* leaf = c.Leaf(
      &c.root(), "env", "★ Run a command with OXIDE_HOST and OXIDE_TOKEN of the profile", "",
      "floatplane env -- oxide instance list --project web", [argv](Session& s) -> CliStatus {
        if (argv->empty()) return Fail(UsageError("env: give the command to run after --"));
        Target t = FP_TRY(s.target());
        setenv("OXIDE_HOST", t.host.c_str(), 1);
        setenv("OXIDE_TOKEN", t.token.c_str(), 1);
        unsetenv("OXIDE_PROFILE");
        std::fflush(stdout);
        // The command replaces this process: its exit status and its signals are its own.
        signal(SIGPIPE, SIG_DFL);
        std::vector<char*> args;
        for (std::string& a : *argv) args.push_back(a.data());
        args.push_back(nullptr);
        execvp(args[0], args.data());
        return Fail(Failure{Exit::kUsage,
                            fmt::format("cannot run {}: {}", (*argv)[0], std::strerror(errno))});
      });
  leaf->add_option("command", *argv, "The command and its arguments")->required();
  leaf->prefix_command();
  leaf->fallthrough(false);
}

void AddApi(Commands& c) {
  struct ApiCmd {
    std::string endpoint, method, input;
    std::vector<std::string> fields, raw_fields, headers;
    bool paginate = false;
    bool include = false;
  };
  auto* cmd = c.Keep<ApiCmd>();
  CLI::App* leaf = c.Leaf(
      &c.root(), "api", "Make a raw API request", "",
      "floatplane api /v1/projects --paginate\n  floatplane api /v1/projects -f name=web -f "
      "description=''",
      [cmd](Session& s) -> CliStatus {
        std::string target = cmd->endpoint.rfind('/', 0) == 0 ? cmd->endpoint : "/" + cmd->endpoint;
        nlohmann::json params = nlohmann::json::object();
        auto split = [](const std::string& kv,
                        const char* flag) -> CliResult<std::pair<std::string, std::string>> {
          size_t eq = kv.find('=');
          if (eq == std::string::npos)
            return Fail(UsageError(fmt::format("missing value in {}: \"{}\"", flag, kv)));
          return std::make_pair(kv.substr(0, eq), kv.substr(eq + 1));
        };
        for (const std::string& f : cmd->raw_fields) {
          auto [k, v] = FP_TRY(split(f, "--raw-field"));
          params[k] = v;
        }
        for (const std::string& f : cmd->fields) {
          auto [k, v] = FP_TRY(split(f, "--field"));
          nlohmann::json typed = nlohmann::json::parse(v, nullptr, false);
          if (v == "true" || v == "false" || v == "null" ||
              (!typed.is_discarded() && typed.is_number())) {
            params[k] = typed;
          } else if (!v.empty() && v[0] == '@') {
            std::ifstream in(v.substr(1));
            if (!in)
              return Fail(UsageError(fmt::format("--field {}: cannot read {}", k, v.substr(1))));
            std::ostringstream all;
            all << in.rdbuf();
            params[k] = all.str();
          } else {
            params[k] = v;
          }
        }
        std::string method = cmd->method;
        if (method.empty()) method = params.empty() && cmd->input.empty() ? "GET" : "POST";
        std::transform(method.begin(), method.end(), method.begin(),
                       [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
        std::string body = params.empty() ? "" : Dump(params);
        if (!cmd->input.empty()) {
          std::ostringstream all;
          if (cmd->input == "-") {
            all << std::cin.rdbuf();
          } else {
            std::ifstream in(cmd->input, std::ios::binary);
            if (!in) return Fail(UsageError(fmt::format("--input: cannot read {}", cmd->input)));
            all << in.rdbuf();
          }
          body = all.str();
        }
        std::vector<std::pair<std::string, std::string>> headers;
        for (const std::string& h : cmd->headers) {
          size_t colon = h.find(':');
          if (colon == std::string::npos)
            return Fail(UsageError(fmt::format("--header \"{}\": expected NAME:VALUE", h)));
          headers.emplace_back(h.substr(0, colon), TrimSpace(h.substr(colon + 1)));
        }
        Api* api = FP_TRY(s.api());
        if (cmd->paginate) {
          if (method != "GET")
            return Fail(UsageError("the `--paginate` option is only compatible with GET requests"));
          std::string path = target.substr(0, target.find('?'));
          Query query;
          if (size_t q = target.find('?'); q != std::string::npos) {
            std::string rest = target.substr(q + 1);
            size_t start = 0;
            while (start < rest.size()) {
              size_t amp = rest.find('&', start);
              std::string kv =
                  rest.substr(start, amp == std::string::npos ? std::string::npos : amp - start);
              size_t eq = kv.find('=');
              // Decoded here: List encodes them again.
              query.emplace_back(PercentDecode(kv.substr(0, eq)),
                                 eq == std::string::npos ? "" : PercentDecode(kv.substr(eq + 1)));
              if (amp == std::string::npos) break;
              start = amp + 1;
            }
          }
          ListPrinter printer = FP_TRY(ListPrinter::Make(OutputFormat{}, {}, {}));
          CliStatus listed =
              api->List(path, query, 0, [&](const nlohmann::json& item) { printer.Add(item); });
          printer.Finish();
          return listed;
        }
        // Raw: a key only when asked for (--idempotency-key); the server refuses one on some
        // paths (token create).
        if (!s.globals().idempotency_key.empty() && method != "GET" && method != "HEAD") {
          headers.emplace_back("Idempotency-Key", s.globals().idempotency_key);
        }
        HttpReply reply = FP_TRY(api->Raw(method, target, body, headers));
        if (cmd->include) {
          std::string head = fmt::format("HTTP/1.1 {}\n", reply.status);
          for (const auto& [name, value] : reply.headers)
            head += fmt::format("{}: {}\n", name, value);
          Out(head + "\n");
        }
        if (!reply.body.empty()) {
          nlohmann::json j = nlohmann::json::parse(reply.body, nullptr, false);
          Out(j.is_discarded() ? reply.body : Dump(j, 2) + "\n");
        }
        if (reply.status >= 400)
          return Fail(Failure{Exit::kApiError, DescribeErrorAnswer(reply), reply.status});
        return {};
      });
  leaf->add_option("endpoint", cmd->endpoint, "The endpoint to request, e.g. /v1/projects")
      ->required();
  leaf->add_option("-X,--method", cmd->method,
                   "The HTTP method (default GET, or POST with fields or --input)");
  leaf->add_option("-F,--field", cmd->fields,
                   "KEY=VALUE: a body field, typed (numbers, true, false, null, @file)");
  leaf->add_option("-f,--raw-field", cmd->raw_fields, "KEY=VALUE: a body field, as a string");
  leaf->add_option("-H,--header", cmd->headers, "NAME:VALUE: a request header");
  leaf->add_option("--input", cmd->input, "A file (- for stdin) to send as the body");
  leaf->add_flag("--paginate", cmd->paginate, "Follow next_page and print every item as one array");
  leaf->add_flag("-i,--include", cmd->include, "Print the status line and headers first");
}

// One node of the command tree for `docs --format json` (oxide's cli.json shape).
nlohmann::ordered_json Doc(const CLI::App* app,
                           const std::map<const CLI::App*, std::string>& operations, bool root) {
  nlohmann::ordered_json node;
  node["name"] = root ? "floatplane" : app->get_name();
  if (root) node["version"] = std::string(BuildVersion());
  if (!app->get_description().empty()) node["about"] = app->get_description();
  if (auto it = operations.find(app); it != operations.end() && !it->second.empty()) {
    node["operation_id"] = it->second;
  }
  std::vector<nlohmann::ordered_json> args;
  for (const CLI::Option* o : app->get_options()) {
    if (o->get_name() == "--help" || o->get_name() == "-h,--help") continue;
    nlohmann::ordered_json a;
    if (o->get_lnames().empty() && o->get_snames().empty()) {
      a["name"] = o->get_name();
    } else {
      if (!o->get_lnames().empty()) a["long"] = o->get_lnames().front();
      if (!o->get_snames().empty()) a["short"] = o->get_snames().front();
    }
    if (!o->get_description().empty()) a["help"] = o->get_description();
    args.push_back(a);
  }
  std::sort(args.begin(), args.end(), [](const auto& x, const auto& y) {
    return std::make_tuple(x.contains("name"), x.value("long", ""), x.value("name", "")) <
           std::make_tuple(y.contains("name"), y.value("long", ""), y.value("name", ""));
  });
  if (!args.empty()) node["args"] = args;
  std::vector<const CLI::App*> subs;
  for (const CLI::App* sub : app->get_subcommands({})) {
    if (sub->get_name().empty() || sub->get_name().rfind("__", 0) == 0) continue;
    subs.push_back(sub);
  }
  std::sort(subs.begin(), subs.end(),
            [](const CLI::App* a, const CLI::App* b) { return a->get_name() < b->get_name(); });
  nlohmann::ordered_json children = nlohmann::ordered_json::array();
  for (const CLI::App* sub : subs) children.push_back(Doc(sub, operations, false));
  if (!children.empty()) node["subcommands"] = children;
  return node;
}

void DocText(const CLI::App* app, const std::string& prefix, std::vector<std::string>& lines) {
  std::vector<const CLI::App*> subs;
  for (const CLI::App* sub : app->get_subcommands({})) {
    if (sub->get_name().rfind("__", 0) != 0) subs.push_back(sub);
  }
  if (subs.empty()) {
    lines.push_back(prefix + " \u2014 " + app->get_description());
    return;
  }
  for (const CLI::App* sub : subs) DocText(sub, prefix + " " + sub->get_name(), lines);
}

}  // namespace

void AddToolCommands(Commands& c) {
  AddAuthCommands(c);
  AddEnv(c);
  AddApi(c);
  c.Leaf(&c.root(), "ping", "Ping API", "ping", "floatplane ping", [](Session& s) -> CliStatus {
    Api* api = FP_TRY(s.api());
    Out(PrettyJson(FP_TRY(api->Get("/v1/ping"))));
    return {};
  });
  c.Leaf(
      &c.root(), "version", "Print the client's version and the API version it speaks", "",
      "floatplane version", [](Session&) -> CliStatus {
        Out(fmt::format("floatplane CLI {}\nBuilt from commit: {}\nOxide API: {}\n", BuildVersion(),
                        BuildCommit().empty() ? "unknown" : BuildCommit(), kApiVersion));
        return {};
      });
  auto* format = c.Keep<std::string>();
  *format = "text";
  CLI::App* docs =
      c.Leaf(&c.root(), "docs", "Print the command tree (json: oxide's cli.json shape)", "",
             "floatplane docs --format json", [format, &c](Session&) -> CliStatus {
               if (*format == "json") {
                 Out(Doc(&c.root(), c.operations(), true).dump(2) + "\n");
                 return {};
               }
               std::vector<std::string> lines;
               DocText(&c.root(), "floatplane", lines);
               std::sort(lines.begin(), lines.end());
               std::string text;
               for (const std::string& l : lines) text += l + "\n";
               Out(text);
               return {};
             });
  docs->add_option("--format", *format, "text or json")->check(CLI::IsMember({"text", "json"}));

  AddCompletionCommands(c);
}

}  // namespace fp::cli
