// Shell completion: `completion -s SHELL` prints the script; the script calls `__complete`
// with the words so far, which prints the candidates for the next one: subcommands and flags,
// a flag's allowed values, and the names of the resources a flag names (asked of the API).

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cli/command_kit.h"

namespace fp::cli {

namespace {

// The values an option accepts, from its CLI::IsMember check, whose description is the set as
// "{a,b,c}" (CLI11's own rendering: cli_test checks that completion still sees them).
std::vector<std::string> AllowedValues(const CLI::Option* option) {
  auto* o = const_cast<CLI::Option*>(option);  // CLI11 offers no const access to validators
  for (int i = 0;; ++i) {
    const CLI::Validator* v = nullptr;
    try {
      v = o->get_validator(i);
    } catch (const CLI::OptionNotFound&) {
      return {};
    }
    std::string d = v->get_description();
    if (d.size() < 2 || d.front() != '{' || d.back() != '}') continue;
    std::vector<std::string> out;
    size_t start = 1;
    for (size_t comma; (comma = d.find(',', start)) != std::string::npos; start = comma + 1) {
      out.push_back(d.substr(start, comma - start));
    }
    out.push_back(d.substr(start, d.size() - 1 - start));
    return out;
  }
}

// The value of `--flag` among the words, if given.
std::string FlagValue(const std::vector<std::string>& words, const std::string& flag) {
  for (size_t i = 0; i + 1 < words.size(); ++i) {
    if (words[i] == flag) return words[i + 1];
  }
  return "";
}

// The names (ids for sleds and sagas) of the resources a flag names, from the API; none when
// the flag names no resource, the words lack the project it needs, or the API cannot say.
std::vector<std::string> ResourceNames(Session& s, const std::vector<std::string>& words,
                                       const std::string& flag, bool system) {
  const std::string project = FlagValue(words, "--project");
  std::string path;
  Query query;
  std::string field = "name";
  if (flag == "--project") {
    path = "/v1/projects";
  } else if (flag == "--instance" || flag == "--floating-ip") {
    if (project.empty()) return {};
    path = flag == "--instance" ? "/v1/instances" : "/v1/floating-ips";
    query.emplace_back("project", project);
  } else if (flag == "--pool") {
    path = system ? "/v1/system/ip-pools" : "/v1/ip-pools";
  } else if (flag == "--silo") {
    path = "/v1/system/silos";
  } else if (flag == "--sled-id" || flag == "--target-sled") {
    path = "/v1/system/hardware/sleds";
    field = "id";
  } else {
    return {};
  }
  query.emplace_back("limit", "1000");
  auto api = s.api();
  if (!api) return {};
  auto page = (*api)->Get(path, query);
  if (!page || !page->contains("items") || !(*page)["items"].is_array()) return {};
  std::vector<std::string> out;
  for (const nlohmann::json& item : (*page)["items"]) {
    if (item.contains(field) && item[field].is_string())
      out.push_back(item[field].get<std::string>());
  }
  return out;
}

// The candidates for the word after `words` (the command line so far, without the program).
std::vector<std::string> Candidates(Session& s, const CLI::App& root,
                                    const std::vector<std::string>& words) {
  const CLI::App* node = &root;
  std::vector<std::string> path;  // the subcommands named so far
  for (const std::string& w : words) {
    if (w.rfind('-', 0) == 0) continue;
    for (const CLI::App* sub : node->get_subcommands({})) {
      if (sub->get_name() == w) {
        node = sub;
        path.push_back(w);
        break;
      }
    }
  }
  // After a flag that takes a value: its values.
  if (!words.empty() && words.back().rfind("--", 0) == 0) {
    const std::string& flag = words.back();
    for (const CLI::App* at = node; at != nullptr; at = at->get_parent()) {
      for (const CLI::Option* o : at->get_options()) {
        const auto& names = o->get_lnames();
        if (std::find(names.begin(), names.end(), flag.substr(2)) == names.end()) continue;
        if (o->get_expected_max() == 0) break;  // a flag without a value
        std::vector<std::string> values = AllowedValues(o);
        if (values.empty()) {
          values = ResourceNames(s, words, flag, !path.empty() && path.front() == "system");
        }
        return values;
      }
    }
  }
  std::vector<std::string> out;
  for (const CLI::App* sub : node->get_subcommands({})) {
    if (sub->get_name().rfind("__", 0) != 0) out.push_back(sub->get_name());
  }
  for (const CLI::Option* o : node->get_options()) {
    for (const std::string& l : o->get_lnames()) out.push_back("--" + l);
  }
  return out;
}

}  // namespace

void AddCompletionCommands(Commands& c) {
  auto* shell = c.Keep<std::string>();
  CLI::App* completion = c.Leaf(
      &c.root(), "completion",
      "Print a shell completion script: eval \"$(floatplane completion -s bash)\"", "",
      "eval \"$(floatplane completion -s bash)\"", [shell](Session&) -> CliStatus {
        if (*shell == "fish") {
          Out("complete -c floatplane -f -a '(floatplane __complete (commandline -opc)[2..-1])'\n");
          return {};
        }
        std::string script =
            "_floatplane() {\n"
            "  local words=(\"${COMP_WORDS[@]:1:COMP_CWORD-1}\")\n"
            "  COMPREPLY=($(compgen -W \"$(floatplane __complete \"${words[@]}\" 2>/dev/null)\" -- "
            "\"${COMP_WORDS[COMP_CWORD]}\"))\n"
            "}\n"
            "complete -F _floatplane floatplane\n";
        if (*shell == "zsh") script = "autoload -U +X bashcompinit && bashcompinit\n" + script;
        Out(script);
        return {};
      });
  completion->add_option("-s,--shell", *shell, "bash, zsh or fish")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh", "fish"}));

  // What the completion scripts call: the words so far in, the candidates for the next out.
  auto* app = c.Keep<CLI::App*>();
  CLI::App* complete =
      c.Leaf(&c.root(), "__complete", "", "", "", [app, &c](Session& s) -> CliStatus {
        // A shell waits for the answer: names the API cannot give within 3 s are left out.
        c.globals().timeout_s = std::min(c.globals().timeout_s, 3.0);
        std::string out;
        for (const std::string& w : Candidates(s, c.root(), (*app)->remaining())) out += w + "\n";
        Out(out);
        return {};
      });
  complete->group("");
  // Every word after it is left unparsed, options included: they are the words to complete.
  complete->prefix_command();
  complete->allow_extras();
  complete->fallthrough(false);
  *app = complete;
}

}  // namespace fp::cli
