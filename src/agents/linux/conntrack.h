#pragma once

// Connection tracking (libnetfilter-conntrack): the sled's NAT bindings outlive the nft map
// entries that made them, so an address taken off a port must also lose its tracked flows, or
// an established flow keeps reaching the old owner (../shared/spec/dataplane-linux.md pitfall 5).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/ip.h"

namespace fp::agents::dataplane {

// libnetfilter_conntrack is loaded on first use, not linked (netfilter_loader.cc): "" once it
// is, else why it cannot be. FlushConntrack asks first.
std::string LoadConntrack();

// Deletes, in the calling thread's network namespace, the tracked connections of `addresses`:
// every one whose original or reply destination is one of them (inbound flows to it, and flows
// sent as it, through a 1:1 or a SNAT address), only those in conntrack zone `zone` when given
// (one port's flows: a SNAT address is shared by several ports). One walk of the kernel's
// table whatever the number of addresses. Returns how many it deleted. Errors: Internal when
// conntrack cannot be read.
Result<size_t> FlushConntrack(const std::vector<IpAddr>& addresses,
                              std::optional<uint16_t> zone = std::nullopt);

}  // namespace fp::agents::dataplane
