#include "cmd/agents.h"

#include <fmt/format.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <memory>
#include <string_view>

#include "agents/daemon/sled_agent.h"
#include "agents/daemon/switch_agent.h"
#include "agents/linux/sled_ports.h"
#include "agents/linux/switch_nat.h"
#include "cmd/process.h"
#include "common/log.h"

namespace fp::cmd {

namespace {

// Serves an agent (Agent is SwitchAgentDaemon or SledAgentDaemon) made by `start` until SIGINT or
// SIGTERM.
template <typename Agent>
int RunAgent(
    const std::string& command, const std::string& listen, const std::string& secret_file,
    agents::daemon::DaemonOptions options,
    const std::function<Result<std::unique_ptr<Agent>>(const agents::daemon::DaemonOptions&)>&
        start) {
  auto address = ParseListen(listen);
  if (!address) {
    std::cerr << "floatplane " << command << ": " << address.error().message() << "\n";
    return 2;
  }
  if (secret_file.empty()) {
    std::cerr << "floatplane " << command
              << ": --secret-file FILE is required: the agent obeys only the control plane, "
                 "which presents the secret in that file (give the server the same file as "
                 "--agent-secret-file; make one with: head -c 32 /dev/urandom | base64 > FILE)\n";
    return 2;
  }
  auto secret = agents::AgentSecret::ReadFile(secret_file);
  if (!secret) {
    std::cerr << "floatplane " << command << ": --secret-file: " << secret.error().message()
              << "\n";
    return 2;
  }
  options.secret = *secret;
  options.host = address->host;
  options.port = address->port;

  sigset_t stop_signals = BlockStopSignals();
  auto agent = start(options);
  if (!agent) {
    std::cerr << "floatplane " << command << ": " << agent.error().message() << "\n";
    return 1;
  }
  std::cout << "listening on " << (*agent)->base_url() << std::endl;
  LogEvent("info", "serving",
           {{"agent", command},
            {"address", fmt::format("{}:{}", http::UrlHost(address->host), (*agent)->port())}});

  AllocatorTrimmer trimmer(options.clock_or_machine());
  WaitForStopSignal(stop_signals);
  (*agent)->Stop();
  LogEvent("info", "stopped");
  return 0;
}

// The dataplane an agent command runs on ("sim" or "nftables") from its flags, or "" after
// saying on stderr what is wrong: none named, --sim against another --dataplane, nftables
// without a namespace (it would program the host's), or nftables' flags (`nft_flags`, named
// `nft_flag_names`) with sim. `lab_netns` names the lab namespace an example would use.
std::string ChooseDataplane(const std::string& command, bool sim, const std::string& dataplane,
                            const std::string& netns, bool nft_flags,
                            std::string_view nft_flag_names, std::string_view lab_netns) {
  std::string chosen = sim ? "sim" : dataplane;
  std::string problem;
  if (chosen.empty()) {
    problem = "say where it takes effect: --dataplane nftables (with --netns) or --dataplane sim";
  } else if (sim && !dataplane.empty() && dataplane != "sim") {
    problem = fmt::format("--sim and --dataplane {} contradict each other", dataplane);
  } else if (chosen == "nftables" && netns.empty()) {
    problem = fmt::format(
        "--dataplane nftables needs --netns NAME: the agent programs a namespace made for it "
        "(scripts/lab's {}), never the host's",
        lab_netns);
  } else if (chosen == "sim" && nft_flags) {
    problem = fmt::format("{} are for --dataplane nftables", nft_flag_names);
  }
  if (problem.empty()) return chosen;
  std::cerr << "floatplane " << command << ": " << problem << "\n";
  return "";
}

}  // namespace

void AddAgentCommands(CLI::App& app, AgentFlags& flags) {
  flags.switch_agent =
      app.add_subcommand("switch-agent", "Run a switch agent (the rack switch's NAT table)");
  flags.switch_agent->add_flag("--sim", flags.switch_sim,
                               "Simulated: the NAT table in memory (as --dataplane sim)");
  flags.switch_agent
      ->add_option("--dataplane", flags.switch_dataplane,
                   "Where the NAT table takes effect: sim (in memory only) or nftables (maps in "
                   "the --netns namespace, through libnftables; needs root)")
      ->check(CLI::IsMember({"sim", "nftables"}));
  flags.switch_agent->add_option(
      "--netns", flags.switch_netns,
      "With nftables (required): the network namespace it programs, a name under /run/netns "
      "(scripts/lab's P-sw)");
  flags.switch_agent->add_option(
      "--underlay", flags.switch_underlay,
      "With nftables: the switch's IPv6 underlay address, the source of the VXLAN tunnels to "
      "the sleds (scripts/lab's LAB_SWITCH_UNDERLAY); without it the agent keeps the NAT maps "
      "but makes no tunnels");
  flags.switch_agent
      ->add_option(
          "--listen", flags.switch_listen,
          "ADDRESS:PORT to serve on, an IPv4 or [IPv6] address (port 0 picks a free port; the "
          "address is printed)")
      ->capture_default_str();

  flags.sled_agent =
      app.add_subcommand("sled-agent", "Run a sled agent (instances and their external IPs)");
  flags.sled_agent->add_flag("--sim", flags.sled_sim,
                             "Simulated: instances and their ports in memory (as --dataplane sim)");
  flags.sled_agent
      ->add_option("--dataplane", flags.sled_dataplane,
                   "Where instances and their ports take effect: sim (in memory only) or "
                   "nftables (a network namespace per instance, NAT in the --netns namespace; "
                   "needs root)")
      ->check(CLI::IsMember({"sim", "nftables"}));
  flags.sled_agent->add_option("--netns", flags.sled_netns,
                               "With nftables (required): the sled's network namespace "
                               "(scripts/lab's P-sled0)");
  flags.sled_agent->add_option("--underlay", flags.sled_underlay,
                               "With nftables: this sled's IPv6 underlay address (the one NAT "
                               "entries name; scripts/lab's LAB_SLED0_UNDERLAY)");
  flags.sled_agent->add_option("--switch-underlay", flags.sled_switch_underlay,
                               "With nftables: the switch's IPv6 underlay address");
  flags.sled_agent->add_option("--vm-netns-prefix", flags.sled_vm_prefix,
                               "With nftables: instance namespaces are named "
                               "PREFIX-vm-<id's first 8 hex digits>; default: --netns (each "
                               "sled's own: an instance migrating has one on either sled)");
  flags.sled_agent->add_option(
      "--serial", flags.sled_serial,
      "This sled's serial number, reported to the control plane, which keeps one sled per "
      "serial: an agent started again on another address is the same sled, with its "
      "instances. Without it the control plane names the sled by the agent's URL");
  flags.sled_agent
      ->add_option(
          "--listen", flags.sled_listen,
          "ADDRESS:PORT to serve on, an IPv4 or [IPv6] address (port 0 picks a free port; the "
          "address is printed)")
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
  for (CLI::App* agent : {flags.switch_agent, flags.sled_agent}) {
    AddLogLevelOption(*agent, flags.log_level, "requests that only read");
    agent
        ->add_option("--secret-file", flags.secret_file,
                     "Required: a file whose first line is the secret the control plane presents "
                     "on every call (the server's --agent-secret-file); any other caller is "
                     "answered 401 and changes nothing")
        ->type_name("FILE");
    agent->add_flag("--enable-test-faults", flags.test_faults,
                    "Answer test fault injection (POST /faults, POST /reset: failures, hangs, "
                    "lost state on demand); for tests and drills only, never in production");
  }
}

int RunAgentCommand(const AgentFlags& flags) {
  ApplyLogLevel(flags.log_level);
  if (flags.switch_agent->parsed()) {
    std::string dataplane = ChooseDataplane(
        "switch-agent", flags.switch_sim, flags.switch_dataplane, flags.switch_netns,
        !flags.switch_netns.empty() || !flags.switch_underlay.empty(), "--netns and --underlay",
        "P-sw");
    if (dataplane.empty()) return 2;
    using agents::daemon::SwitchAgentDaemon;
    agents::daemon::DaemonOptions switch_options;
    switch_options.test_faults = flags.test_faults;
    return RunAgent<SwitchAgentDaemon>(
        "switch-agent", flags.switch_listen, flags.secret_file, switch_options,
        [&](const agents::daemon::DaemonOptions& options)
            -> Result<std::unique_ptr<SwitchAgentDaemon>> {
          if (dataplane == "sim") return SwitchAgentDaemon::Start(options);
          std::optional<IpAddr> underlay;
          if (!flags.switch_underlay.empty()) {
            auto parsed = IpAddr::Parse(flags.switch_underlay);
            if (!parsed) {
              return Fail(Error::InvalidRequest(
                  fmt::format("--underlay \"{}\" is not an IP address", flags.switch_underlay)));
            }
            underlay = *parsed;
          }
          auto nat = FP_TRY(agents::dataplane::SwitchNat::Open(flags.switch_netns, underlay));
          return SwitchAgentDaemon::Start(options, std::move(nat));
        });
  }
  std::string dataplane =
      ChooseDataplane("sled-agent", flags.sled_sim, flags.sled_dataplane, flags.sled_netns,
                      !flags.sled_netns.empty() || !flags.sled_underlay.empty() ||
                          !flags.sled_switch_underlay.empty() || !flags.sled_vm_prefix.empty(),
                      "--netns, --underlay, --switch-underlay and --vm-netns-prefix", "P-sled0");
  if (dataplane.empty()) return 2;
  agents::daemon::DaemonOptions options;
  options.start_delay = std::chrono::milliseconds(flags.start_delay_ms);
  options.stop_delay = std::chrono::milliseconds(flags.stop_delay_ms);
  if (!flags.sled_serial.empty()) options.serial = flags.sled_serial;
  options.test_faults = flags.test_faults;
  using agents::daemon::SledAgentDaemon;
  return RunAgent<SledAgentDaemon>(
      "sled-agent", flags.sled_listen, flags.secret_file, options,
      [&](const agents::daemon::DaemonOptions& o) -> Result<std::unique_ptr<SledAgentDaemon>> {
        if (dataplane == "sim") return SledAgentDaemon::Start(o);
        auto underlay = IpAddr::Parse(flags.sled_underlay);
        auto switch_underlay = IpAddr::Parse(flags.sled_switch_underlay);
        if (!underlay || !switch_underlay) {
          return Fail(Error::InvalidRequest(
              "--dataplane nftables needs --underlay and --switch-underlay (IPv6 addresses)"));
        }
        std::string prefix = flags.sled_vm_prefix.empty() ? flags.sled_netns : flags.sled_vm_prefix;
        agents::daemon::DaemonOptions with_underlay = o;
        with_underlay.underlay = *underlay;
        auto ports = FP_TRY(agents::dataplane::SledPorts::Open(flags.sled_netns, *underlay,
                                                               *switch_underlay, prefix));
        return SledAgentDaemon::Start(with_underlay, std::move(ports));
      });
}

}  // namespace fp::cmd
