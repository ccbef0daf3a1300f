#pragma once

// A sled's instances and their external addresses on Linux (issue 13 item 3;
// ../shared/spec/dataplane-linux.md §4): each instance is a network namespace on a veth to the
// sled, with a Responder for its service; the sled's nftables table does the port's NAT, as
// Oxide's OPTE does per port.
//
// Ports are kept apart as OPTE keeps them: instances of different VPCs may hold the same
// private address on one sled, so nothing on the sled is keyed by private address. Each port
// has a number n, which is its packets' mark, its conntrack zone (each port's flows are its own,
// and a flush on detach touches no other port's) and its routing table (the way to its veth):
//
//   table inet fp_sled
//     map port4_in, port6_in  external address -> n       (1:1 addresses; from the tunnel)
//     map port4_blk, port6_blk SNAT address . block -> n  (replies to SNAT flows, ICMP too)
//     map port_if             veth -> n                   (from the instance)
//     map zone_of             n -> conntrack zone n       (set before conntrack sees a packet)
//     map fip4_in, fip6_in    external -> private          inbound 1:1 DNAT
//     map fip4_out, fip6_out  veth -> external             the source of the instance's own
//                                                          connections: its first 1:1 address
//                                                          of that version (floating first)
//     map snat4, snat6        veth -> SNAT address . ports  otherwise (IPv6 too, unlike Oxide)
//     guards: from the tunnel only DNAT'd connections and replies get through (counter
//     in_unattached); to the tunnel only NAT'd ones (counter out_no_eip)
//
//   ip rule iif vx0 fwmark n lookup <kTableBase + n>: default dev <veth> (IPv4 and IPv6)
//
// Taking an address off a port changes the maps first and then flushes that address's tracked
// connections on the sled, so that no established flow keeps reaching the old owner.
//
// Addressing of an instance's namespace: eth0 holds its private addresses (/32, /128) and
// routes through on-link gateways the sled's side of the veth holds: 169.254.169.1 and
// fe80::1. The sled reaches the switch through vx0 (VXLAN, its MAC from its underlay address,
// tunnel.h), with VNI 99 (Oxide's boundary services VNI).

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agents/linux/netns.h"
#include "agents/linux/nftables.h"
#include "agents/linux/responder.h"
#include "agents/port_dataplane.h"
#include "common/ip.h"
#include "common/uuid.h"

namespace fp::agents::dataplane {

struct SnatBlock {
  IpAddr ip;
  int first_port = 0;
  int last_port = 0;
  bool operator==(const SnatBlock&) const = default;
};

// An instance's private addresses on its primary interface: one of each version at most, at
// least one.
struct PrivateIps {
  std::optional<IpAddr> v4;
  std::optional<IpAddr> v6;
};

// Not thread-safe: the sled agent calls it under its own lock.
class SledPorts final : public PortDataplane {
 public:
  // In the sled's namespace `netns`: vx0 and the routes to the switch's underlay address
  // through it, and the table (an earlier run's table and port rules replaced). Instance
  // namespaces are named `<vm_prefix>-vm-<the instance id's first 8 hex digits>`. Errors:
  // NetnsThread::Start's, Internal when a command or nftables fails.
  static Result<std::unique_ptr<SledPorts>> Open(const std::string& netns, const IpAddr& underlay,
                                                 const IpAddr& switch_underlay,
                                                 std::string vm_prefix);
  // Removes every instance namespace it made.
  ~SledPorts() override;

  // PortDataplane: AddPort (the hostname, else the id's first 8 hex digits; the private
  // addresses) then SetExternalIps with the spec's addresses; RemovePort.
  Status Configure(const InstanceSpec& spec) override;
  Status Remove(const Uuid& id) override { return RemovePort(id); }

  // The instance's namespace, veth and responder (answering as `hostname`). Idempotent for
  // the same addresses; InvalidRequest without any, or with other addresses than the port has.
  Status AddPort(const Uuid& id, const std::string& hostname, const PrivateIps& private_ips);
  // The port's whole external configuration, in one transaction; then the flush of what it
  // lost. `one_to_one` in order of preference for outbound connections. InvalidRequest for an
  // address whose version the port has no private address of, a SNAT block (`snat` IPv4,
  // `snat6` IPv6) of another version or not an aligned 16,384-port block; NotFound for an
  // instance without a port.
  Status SetExternalIps(const Uuid& id, const std::vector<IpAddr>& one_to_one,
                        const std::optional<SnatBlock>& snat,
                        const std::optional<SnatBlock>& snat6 = std::nullopt);
  // Takes the port's addresses off (with their flush) and removes its namespace. Idempotent.
  Status RemovePort(const Uuid& id);
  std::string VmNamespace(const Uuid& id) const;
  // What the instance's responder has answered (tests: what reached the instance); -1 if the
  // instance has no port.
  int64_t Answered(const Uuid& id) const;

 private:
  struct Port {
    uint32_t n = 0;  // mark, conntrack zone, routing table kTableBase + n
    std::string netns;
    std::string veth;
    PrivateIps private_ips;
    std::vector<IpAddr> one_to_one;
    std::optional<SnatBlock> snat;
    std::optional<SnatBlock> snat6;
    std::unique_ptr<Responder> responder;
  };
  SledPorts(std::unique_ptr<NetnsThread> thread, std::string vm_prefix)
      : thread_(std::move(thread)), vm_prefix_(std::move(vm_prefix)) {}
  Status Reconfigure(Port& port, const std::vector<IpAddr>& one_to_one,
                     const std::optional<SnatBlock>& snat, const std::optional<SnatBlock>& snat6);
  Status Plumb(const Port& port);  // on thread_
  uint32_t FreeNumber() const;

  std::unique_ptr<NetnsThread> thread_;
  std::unique_ptr<Nftables> nft_;  // used on thread_ only
  const std::string vm_prefix_;
  std::map<Uuid, Port> ports_;
};

}  // namespace fp::agents::dataplane
