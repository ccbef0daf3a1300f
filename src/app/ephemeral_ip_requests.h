#pragma once

#include <vector>

#include "app/actor.h"
#include "app/instances.h"
#include "app/ip_pools.h"

namespace fp::app {

// Oxide's rules on the ephemeral IPs an InstanceCreate requests (omicron-behaviour.md §2.3),
// checked before anything is created, in this order and these words (all InvalidRequest):
// more than 2 ephemeral IPs; two of them with neither an IP version nor an explicit pool on
// either; two of the same version (both auto, both explicit pools, or one of each); two from
// the same pool. An explicit pool's version is the pool's as the actor's silo sees it: its
// lookup's NotFound comes back as it is.
Status CheckEphemeralIpRequests(IpPools& pools, const Actor& actor,
                                const std::vector<RequestedExternalIp>& requested);

}  // namespace fp::app
