#pragma once

// The rack switch's NAT table as nftables maps (issue 13; ../shared/spec/dataplane-linux.md §3),
// in the switch's network namespace: stateless (no conntrack), exact-match maps only, so a
// packet costs the same with 10 entries or 100,000.
//
//   table inet fp_switch
//     map ext4  ipv4_addr -> mark              full-range entries (floating, ephemeral)
//     map ext6  ipv6_addr -> mark              the same for IPv6
//     map blk4  (ipv4_addr . port block) -> mark   SNAT entries: aligned 16384-port blocks,
//                                                  the block being the top two bits of the port
//     chain steer (prerouting): sets the packet's mark from the maps (TCP/UDP by destination
//       port, ICMP echo replies by identifier, ICMP errors by the quoted packet's source port)
//
// A mark names the entry's target, a (sled underlay address, VNI) pair, numbered from 0x100 in
// the order targets first appear. With an underlay address (the switch's own), each target
// also gets its tunnel: `ip rule fwmark M lookup M` (preference 1000 + its number), and in
// table M a default route, IPv4 and IPv6, through vx0 (VXLAN, external mode) encapsulated with
// the target's VNI to the sled's underlay address, via a fixed next hop whose neighbour entry
// is the sled's tunnel MAC (tunnel.h). Made before the first entry that marks packets for it.
// Rule 999 (IPv6, `iif lo lookup main`) keeps the tunnels' own packets, which carry the inner
// packet's mark, on the underlay's routes.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agents/agents.h"
#include "agents/linux/netns.h"
#include "agents/linux/nftables.h"
#include "agents/nat_dataplane.h"

namespace fp::agents::dataplane {

// Not thread-safe: the switch agent calls it under its table's lock.
class SwitchNat final : public NatDataplane {
 public:
  // Installs the table in network namespace `netns` ("": the caller's), replacing one an
  // earlier run left (a restarted agent starts empty). Errors: those of NetnsThread::Start,
  // Internal when nftables refuses the ruleset.
  // With `underlay` (the switch's underlay address, the tunnels' source) it also (re)creates
  // vx0 and removes the tunnel rules an earlier run left.
  static Result<std::unique_ptr<SwitchNat>> Open(const std::string& netns,
                                                 std::optional<IpAddr> underlay = std::nullopt);
  ~SwitchNat() override;

  // Whether the switch can hold `e`: ports 0-65535, or an aligned 16384-port block of an IPv4
  // address. InvalidRequest naming the range otherwise.
  Status Check(const NatEntry& e) const override { return CheckEntry(e); }
  static Status CheckEntry(const NatEntry& e);

  // Makes the entries `removed` absent and `installed` present (replacing any entry with the
  // same address and first port), in one transaction: packets see the table before or after,
  // never in between. Errors: Check's; Internal when nftables refuses (nothing changed then).
  Status Apply(const std::vector<NatEntry>& removed,
               const std::vector<NatEntry>& installed) override;
  // Makes the maps hold exactly `entries`, in one transaction, whatever they held (flushed and
  // refilled: it also repairs maps changed behind the agent's back).
  Status ReplaceAll(const std::vector<NatEntry>& entries) override;

  // What the maps hold, read back from the kernel: "ext4 203.0.113.10 -> 0x100",
  // "blk4 198.51.100.7 . 2 -> 0x101", sorted. For tests and drift checks.
  Result<std::vector<std::string>> Dump();
  // The mark of a target, if it has one.
  std::optional<uint32_t> MarkOf(const IpAddr& sled, int64_t vni) const;

 private:
  using Target = std::pair<IpAddr, int64_t>;  // sled underlay address, VNI
  // An element's map and key as nft writes them ("ext4", "203.0.113.10").
  struct Key {
    std::string map;
    std::string key;
    auto operator<=>(const Key&) const = default;
  };

  SwitchNat(std::unique_ptr<NetnsThread> thread, std::optional<IpAddr> underlay)
      : thread_(std::move(thread)), underlay_(underlay) {}
  static Key KeyOf(const NatEntry& e);
  // The target's mark; a new target gets its tunnel first (when there is an underlay).
  Result<uint32_t> MarkFor(const NatEntry& e);
  Status MakeTunnel(const Target& target, uint32_t mark);
  Status ResetTunnels();
  // A net change to the maps: per key, its new mark, or none to remove it.
  using Change = std::map<Key, std::optional<uint32_t>>;
  // The commands that make `change` on `installed_` (deletions first, then additions): in the
  // size of the change, not of the table.
  std::string Diff(const Change& change) const;
  // The maps flushed and refilled with `next`, as one transaction.
  Status CommitWhole(std::map<Key, uint32_t> next);
  static std::string Whole(const std::map<Key, uint32_t>& next);

  std::unique_ptr<NetnsThread> thread_;
  const std::optional<IpAddr> underlay_;
  std::unique_ptr<Nftables> nft_;      // used on thread_ only
  std::map<Target, uint32_t> marks_;   // targets seen, by first use
  std::map<Key, uint32_t> installed_;  // what the maps hold
};

}  // namespace fp::agents::dataplane
