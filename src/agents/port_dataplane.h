#pragma once

// Where a sled agent's instances and their ports take effect besides the agent's memory:
// nowhere for the simulated agent, network namespaces and nftables for the Linux one
// (agents/linux/sled_ports.h).

#include "agents/agents.h"
#include "common/error.h"

namespace fp::agents {

class PortDataplane {
 public:
  virtual ~PortDataplane() = default;
  // Makes the instance's port exist (idempotent) and hold exactly the spec's external
  // addresses (its 1:1 addresses in order, the first being its outbound source, and its SNAT
  // block). Errors leave the port as it was.
  virtual Status Configure(const InstanceSpec& spec) = 0;
  // Removes the port (its addresses first). Idempotent.
  virtual Status Remove(const Uuid& id) = 0;
};

}  // namespace fp::agents
