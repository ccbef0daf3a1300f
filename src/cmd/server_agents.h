#pragma once

// The agents a server drives (server_agents.cc): started or reached, registered (sleds by
// their serial), and the switch agents read again on SIGHUP.

#include <memory>
#include <optional>
#include <vector>

#include "agents/agents.h"
#include "agents/daemon/sled_agent.h"
#include "agents/daemon/switch_agent.h"
#include "cmd/server.h"
#include "common/error.h"
#include "loops/sled_agents.h"

namespace fp::db {
class Datastore;
}  // namespace fp::db

namespace fp::loops {
class NatReconciler;
}  // namespace fp::loops

namespace fp::cmd {

// The agents the server drives: external ones named by URL, or simulated ones in this process
// (reached over HTTP on loopback all the same).
struct ServerAgents {
  std::vector<std::unique_ptr<fp::agents::daemon::SwitchAgentDaemon>> switch_sims;
  std::vector<std::unique_ptr<fp::agents::daemon::SledAgentDaemon>> sled_sims;
  std::vector<std::shared_ptr<fp::agents::SwitchAgentClient>> switch_clients;
  std::vector<std::unique_ptr<fp::agents::SledAgentClient>> sled_clients;
  fp::loops::SledAgents sled_agents;
  // What every call to an agent presents: --agent-secret-file's, else (for agents simulated
  // in this process) a random one.
  std::optional<fp::agents::AgentSecret> secret;
};

// The switch and sled agents of --switch-agent and --sled-agent, or (without them) two of each
// simulated in this process; every sled registered in `ds` under its serial (db::SledUpsert),
// its underlay address its agent's own or one assigned in sled order. Errors: a simulated
// agent that cannot start, two agents that say one serial, an agent secret file that cannot
// be read, the datastore's.
Status StartAgents(const ServerFlags& flags, fp::db::Datastore& ds, ServerAgents& out);

// SIGHUP: the switch agents become those the --config file names now (its `switch-agent`, a
// URL or a list of them); switches added are loaded, switches removed are no longer sent
// changes. Without a config file, or with no `switch-agent` in it, nothing changes. Errors
// are logged and change nothing.
void ReloadSwitchAgents(const ServerFlags& flags, const ServerAgents& agents,
                        fp::loops::NatReconciler& nat);

}  // namespace fp::cmd
