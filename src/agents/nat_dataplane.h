#pragma once

// Where a switch agent's NAT table takes effect besides the agent's memory: nowhere for the
// simulated agent, nftables maps for the Linux one (agents/linux/switch_nat.h).

#include <vector>

#include "agents/agents.h"
#include "common/error.h"

namespace fp::agents {

class NatDataplane {
 public:
  virtual ~NatDataplane() = default;
  // Whether the dataplane can hold `e` at all. InvalidRequest naming the entry otherwise.
  virtual Status Check(const NatEntry& e) const = 0;
  // Makes `removed` absent and `installed` present, in one step that packets see whole.
  // Errors leave the dataplane as it was.
  virtual Status Apply(const std::vector<NatEntry>& removed,
                       const std::vector<NatEntry>& installed) = 0;
  // Makes the dataplane hold exactly `entries`, in one step. Errors as Apply's.
  virtual Status ReplaceAll(const std::vector<NatEntry>& entries) = 0;
};

}  // namespace fp::agents
