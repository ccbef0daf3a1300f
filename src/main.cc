// floatplane: the control plane for external IP addresses. `floatplane server --dev` runs the
// API server on an embedded SQLite database; `floatplane switch-agent --sim` and
// `floatplane sled-agent --sim` run simulated dataplane agents. The subcommands live in
// src/cmd/.

#include <CLI/CLI.hpp>

#include "cmd/agents.h"
#include "cmd/process.h"
#include "cmd/server.h"

int main(int argc, char** argv) {
  fp::cmd::TuneAllocator();
  fp::cmd::RaiseDescriptorLimit();
  CLI::App app{"floatplane: the control plane for cloud VMs' public IP addresses"};
  app.require_subcommand(1);

  fp::cmd::ServerFlags server_flags;
  CLI::App* server = fp::cmd::AddServerCommand(app, server_flags);
  fp::cmd::AgentFlags agent_flags;
  fp::cmd::AddAgentCommands(app, agent_flags);

  CLI11_PARSE(app, argc, argv);
  if (server->parsed()) return fp::cmd::RunServer(server_flags);
  if (agent_flags.switch_agent->parsed() || agent_flags.sled_agent->parsed()) {
    return fp::cmd::RunAgentCommand(agent_flags);
  }
  return 2;
}
