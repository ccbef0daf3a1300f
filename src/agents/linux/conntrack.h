#pragma once

// Connection tracking (libnetfilter-conntrack): the sled's NAT bindings outlive the nft map
// entries that made them, so an address taken off a port must also lose its tracked flows, or
// an established flow keeps reaching the old owner (../shared/spec/dataplane-linux.md pitfall 5).

#include <cstddef>
#include <optional>

#include "common/error.h"
#include "common/ip.h"

namespace fp::agents::dataplane {

// Deletes, in the calling thread's network namespace, the tracked connections of `address`:
// without `source`, every one whose original or reply destination is `address` (inbound flows
// to it, and the port's own flows sent as it: a 1:1 address); with `source`, only those from
// `source` whose reply destination is `address` (one port's flows through a shared SNAT
// address). Returns how many it deleted. Errors: Internal when conntrack cannot be read.
Result<size_t> FlushConntrack(const IpAddr& address,
                              const std::optional<IpAddr>& source = std::nullopt);

}  // namespace fp::agents::dataplane
