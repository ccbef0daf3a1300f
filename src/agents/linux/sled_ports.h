#pragma once

// A sled's instances and their external addresses on Linux (issue 13 item 3;
// ../shared/spec/dataplane-linux.md §4): each instance is a network namespace on a veth to the
// sled, with a Responder for its service; the sled's nftables table does the port's NAT, as
// Oxide's OPTE does per port:
//
//   table inet fp_sled
//     map fip4_in   external -> private        inbound 1:1 DNAT (floating, ephemeral)
//     map fip4_out  private -> external        the source of the instance's own connections
//                                              (the first of its 1:1 addresses)
//     map snat4     private -> SNAT address . port block   otherwise
//     set ports4    the instances' private addresses: one still leaving for the switch after
//                   NAT has no external address, and is dropped (counter out_no_eip)
//     a forward guard: from the tunnel only DNAT'd connections and replies get through
//     (counter in_unattached counts the rest)
//
// Taking an address off a port changes the map first and then flushes that address's tracked
// connections on the sled, so that no established flow keeps reaching the old owner.
//
// Addressing of an instance's namespace: eth0 holds its private address /32 and routes through
// the fixed on-link gateway 169.254.169.1, which the sled's side of the veth holds. The sled
// reaches the switch through vx0 (VXLAN, its MAC from its underlay address, tunnel.h), with
// VNI 99 (Oxide's boundary services VNI).

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

// Not thread-safe: the sled agent calls it under its own lock.
class SledPorts final : public PortDataplane {
 public:
  // In the sled's namespace `netns`: vx0 and the route to the switch's underlay address
  // through it, and the table (an earlier run's replaced). Instance namespaces are named
  // `<vm_prefix>-vm-<the instance id's first 8 hex digits>`. Errors: NetnsThread::Start's,
  // Internal when a command or nftables fails.
  static Result<std::unique_ptr<SledPorts>> Open(const std::string& netns, const IpAddr& underlay,
                                                 const IpAddr& switch_underlay,
                                                 std::string vm_prefix);
  // Removes every instance namespace it made.
  ~SledPorts() override;

  // PortDataplane: AddPort (the hostname, else the id's first 8 hex digits; the private IPv4
  // address, required) then SetExternalIps with the spec's addresses; RemovePort.
  Status Configure(const InstanceSpec& spec) override;
  Status Remove(const Uuid& id) override { return RemovePort(id); }

  // The instance's namespace, veth and responder (answering as `hostname`). Idempotent.
  Status AddPort(const Uuid& id, const std::string& hostname, const IpAddr& private_ip);
  // The port's whole external configuration, in one transaction; then the flush of what it lost.
  // NotFound for an instance without a port.
  Status SetExternalIps(const Uuid& id, const std::vector<IpAddr>& one_to_one,
                        const std::optional<SnatBlock>& snat);
  // Takes the port's addresses off (with their flush) and removes its namespace. Idempotent.
  Status RemovePort(const Uuid& id);
  std::string VmNamespace(const Uuid& id) const;
  // What the instance's responder has answered (tests: what reached the instance); -1 if the
  // instance has no port.
  int64_t Answered(const Uuid& id) const;

 private:
  struct Port {
    std::string netns;
    std::string veth;
    IpAddr private_ip;
    std::vector<IpAddr> one_to_one;
    std::optional<SnatBlock> snat;
    std::unique_ptr<Responder> responder;
  };
  SledPorts(std::unique_ptr<NetnsThread> thread, std::string vm_prefix)
      : thread_(std::move(thread)), vm_prefix_(std::move(vm_prefix)) {}
  Status Reconfigure(Port& port, const std::vector<IpAddr>& one_to_one,
                     const std::optional<SnatBlock>& snat);

  std::unique_ptr<NetnsThread> thread_;
  std::unique_ptr<Nftables> nft_;  // used on thread_ only
  const std::string vm_prefix_;
  std::map<Uuid, Port> ports_;
};

}  // namespace fp::agents::dataplane
