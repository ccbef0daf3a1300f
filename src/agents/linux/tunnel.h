#pragma once

// The rack's encapsulation between the switch and the sleds: VXLAN (external mode, over the
// IPv6 underlay; ../shared/spec/dataplane-linux.md §2 on why not Geneve on this kernel). Both
// ends derive the same values from what the NAT entries carry, so no agent needs to ask
// another: a sled's tunnel MAC comes from its underlay address.

#include <array>
#include <cstdint>
#include <string>

#include "common/ip.h"

namespace fp::agents::dataplane {

inline constexpr int kVxlanPort = 4789;
// The switch's end of the tunnel: its vx0's MAC, and the on-link next hops the sleds route
// through (a collect_md VXLAN device cannot resolve neighbours, so next hops are fixed).
inline constexpr std::string_view kSwitchTunnelMac = "02:00:00:00:ff:01";
inline constexpr std::string_view kSwitchNextHop4 = "169.254.0.1";
inline constexpr std::string_view kSwitchNextHop6 = "fe80::ff:1";

// The MAC of the sled's vx0: locally administered, from a hash of its underlay address, so
// that the switch addresses inner frames to it without asking (a VXLAN device drops frames
// addressed to another MAC). "02:xx:xx:xx:xx:xx".
std::string SledTunnelMac(const IpAddr& sled_underlay);

}  // namespace fp::agents::dataplane
