#pragma once

// `floatplane switch-agent` and `floatplane sled-agent`: the dataplane agents as processes of
// their own.

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace fp::cmd {

struct AgentFlags {
  CLI::App* switch_agent = nullptr;  // the subcommands, once added
  CLI::App* sled_agent = nullptr;
  bool switch_sim = false;
  std::string switch_dataplane;  // "sim" or "nftables"
  std::string switch_netns;
  std::string switch_underlay;
  std::string switch_listen = "127.0.0.1:0";
  bool sled_sim = false;
  std::string sled_dataplane;  // "sim" or "nftables"
  std::string sled_netns;
  std::string sled_underlay;
  std::string sled_switch_underlay;
  std::string sled_vm_prefix;
  std::string sled_serial;
  bool test_faults = false;
  std::string secret_file;  // both agents: the control plane's secret (agents/agent_secret.h)
  std::string sled_listen = "127.0.0.1:0";
  int64_t start_delay_ms = 200;
  int64_t stop_delay_ms = 200;
  std::string log_level = "info";  // both agents: debug, info, warn or error
};

// Adds both subcommands, whose flags fill `flags`.
void AddAgentCommands(CLI::App& app, AgentFlags& flags);

// Runs the agent subcommand that was parsed until SIGINT or SIGTERM; returns the process's exit
// status (0 after a clean stop, 1 when it could not start, 2 for a usage error).
int RunAgentCommand(const AgentFlags& flags);

}  // namespace fp::cmd
