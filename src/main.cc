// floatplane: the control plane for external IP addresses. `floatplane server --dev` runs the
// API server on an embedded SQLite database; `floatplane switch-agent --sim` and
// `floatplane sled-agent --sim` run simulated dataplane agents; every other subcommand is the
// command-line client (`floatplane floating-ip list --project web`, in the Oxide CLI's command
// tree). The server's subcommands live in src/cmd/, the client's in src/cli/.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/client.h"
#include "cmd/agents.h"
#include "cmd/process.h"
#include "cmd/server.h"

int main(int argc, char** argv) {
  fp::cmd::TuneAllocator();
  fp::cmd::RaiseDescriptorLimit();
  CLI::App app{"floatplane: the control plane for cloud VMs' public IP addresses"};
  // Usage lines name the program, not the path it was run by.
  app.name("floatplane");
  app.require_subcommand(1);

  fp::cmd::ServerFlags server_flags;
  CLI::App* server = fp::cmd::AddServerCommand(app, server_flags);
  fp::cmd::AgentFlags agent_flags;
  fp::cmd::AddAgentCommands(app, agent_flags);
  // The composition root: the one place that picks the machine's time and randomness.
  fp::SystemClock clock;
  fp::SystemRandom random;
  fp::cli::Commands client(app, clock, random);
  fp::cli::AddResourceCommands(client);
  fp::cli::AddSystemCommands(client);
  fp::cli::AddToolCommands(client);

  // `floatplane` alone and `floatplane help` show the commands (stdout, exit 0), as `--help`
  // does; `floatplane help instance create` is `floatplane instance create --help`;
  // `floatplane --version` is `floatplane version`.
  std::vector<std::string> words(argv + 1, argv + argc);
  if (words.empty()) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  }
  // The first word that is not a global option (or an option's value).
  size_t first = 0;
  while (first < words.size() && words[first].rfind('-', 0) == 0) {
    if (words[first] == "--version" || words[first] == "-V") {
      words[first] = "version";
      break;
    }
    const std::string& word = words[first];
    const CLI::Option* o = app.get_option_no_throw(word.substr(0, word.find('=')));
    bool takes_value =
        o != nullptr && word.find('=') == std::string::npos && o->get_items_expected_max() > 0;
    first += takes_value ? 2 : 1;
  }
  if (first < words.size() && words[first] == "help") {
    words.erase(words.begin() + static_cast<std::ptrdiff_t>(first));
    words.emplace_back("--help");
  }
  std::vector<char*> rewritten{argv[0]};
  for (std::string& w : words) rewritten.push_back(w.data());
  argc = static_cast<int>(rewritten.size());
  argv = rewritten.data();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::RequiredError& e) {
    // No command at all (global options only, e.g. --config-dir): the commands, as `floatplane`
    // alone shows them.
    if (app.get_subcommands().empty()) {
      std::fputs(app.help().c_str(), stdout);
      return 0;
    }
    std::fputs(fp::cli::DescribeUsageError(app, argc, argv, e).c_str(), stderr);
    return static_cast<int>(fp::cli::Exit::kUsage);
  } catch (const CLI::ParseError& e) {
    // A usage error: the message (with the group's commands when one is missing or unknown),
    // and exit 2 whatever CLI11's own code.
    std::fputs(fp::cli::DescribeUsageError(app, argc, argv, e).c_str(), stderr);
    return static_cast<int>(fp::cli::Exit::kUsage);
  }
  if (server->parsed()) {
    if (CLI::Option* config = app.get_config_ptr(); config != nullptr && config->count() > 0) {
      server_flags.config_file = config->as<std::string>();
    }
    return fp::cmd::RunServer(server_flags);
  }
  if (agent_flags.switch_agent->parsed() || agent_flags.sled_agent->parsed()) {
    return fp::cmd::RunAgentCommand(agent_flags);
  }
  if (client.Parsed()) return client.Run();
  return static_cast<int>(fp::cli::Exit::kUsage);
}
