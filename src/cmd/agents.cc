#include "cmd/agents.h"

#include <fmt/format.h>

#include <chrono>
#include <iostream>

#include "agents/sim/sled_agent_sim.h"
#include "agents/sim/switch_agent_sim.h"
#include "cmd/process.h"
#include "common/log.h"

namespace fp::cmd {

namespace {

// Serves a simulated agent (Agent is SwitchAgentSim or SledAgentSim) until SIGINT or SIGTERM.
template <typename Agent>
int RunAgent(const std::string& command, bool sim, const std::string& listen,
             agents::sim::SimOptions options) {
  if (!sim) {
    std::cerr << "floatplane " << command << ": only the simulated agent exists so far; run "
              << "`floatplane " << command << " --sim`\n";
    return 2;
  }
  auto address = ParseListen(listen);
  if (!address) {
    std::cerr << "floatplane " << command << ": " << address.error().message() << "\n";
    return 2;
  }
  options.host = address->host;
  options.port = address->port;

  sigset_t stop_signals = BlockStopSignals();
  auto agent = Agent::Start(options);
  if (!agent) {
    std::cerr << "floatplane " << command << ": " << agent.error().message() << "\n";
    return 1;
  }
  std::cout << "listening on " << (*agent)->base_url() << std::endl;
  LogEvent("info", "serving",
           {{"agent", command},
            {"address", fmt::format("{}:{}", http::UrlHost(address->host), (*agent)->port())}});

  WaitForStopSignal(stop_signals);
  (*agent)->Stop();
  LogEvent("info", "stopped");
  return 0;
}

}  // namespace

void AddAgentCommands(CLI::App& app, AgentFlags& flags) {
  flags.switch_agent =
      app.add_subcommand("switch-agent", "Run a switch agent (the rack switch's NAT table)");
  flags.switch_agent->add_flag("--sim", flags.switch_sim, "Simulated: the NAT table in memory");
  flags.switch_agent
      ->add_option("--listen", flags.switch_listen,
                   "HOST:PORT to serve on (port 0 picks a free port; the address is printed)")
      ->capture_default_str();

  flags.sled_agent =
      app.add_subcommand("sled-agent", "Run a sled agent (instances and their external IPs)");
  flags.sled_agent->add_flag("--sim", flags.sled_sim,
                             "Simulated: instances and their ports in memory");
  flags.sled_agent
      ->add_option("--listen", flags.sled_listen,
                   "HOST:PORT to serve on (port 0 picks a free port; the address is printed)")
      ->capture_default_str();
  flags.sled_agent
      ->add_option("--start-delay-ms", flags.start_delay_ms,
                   "How long an instance stays starting before it runs")
      ->check(CLI::Range(int64_t{0}, int64_t{3'600'000}))
      ->capture_default_str();
  flags.sled_agent
      ->add_option("--stop-delay-ms", flags.stop_delay_ms,
                   "How long an instance stays stopping before it is stopped")
      ->check(CLI::Range(int64_t{0}, int64_t{3'600'000}))
      ->capture_default_str();
}

int RunAgentCommand(const AgentFlags& flags) {
  if (flags.switch_agent->parsed()) {
    return RunAgent<agents::sim::SwitchAgentSim>("switch-agent", flags.switch_sim,
                                                 flags.switch_listen, {});
  }
  agents::sim::SimOptions options;
  options.start_delay = std::chrono::milliseconds(flags.start_delay_ms);
  options.stop_delay = std::chrono::milliseconds(flags.stop_delay_ms);
  return RunAgent<agents::sim::SledAgentSim>("sled-agent", flags.sled_sim, flags.sled_listen,
                                             options);
}

}  // namespace fp::cmd
