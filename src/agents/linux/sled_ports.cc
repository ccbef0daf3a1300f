#include "agents/linux/sled_ports.h"

#include <fmt/format.h>

#include <algorithm>

#include "agents/linux/conntrack.h"
#include "agents/linux/tunnel.h"

namespace fp::agents::dataplane {

namespace {

constexpr std::string_view kGateway4 = "169.254.169.1";
constexpr std::string_view kGateway6 = "fe80::1";
constexpr int kBoundaryVni = 99;
constexpr int kBlockPorts = 16384;
// Port n's routing table is kTableBase + n; its rules (one per IP version) have preference
// kRulePreference, which no other rule on the sled has: an earlier run's are found by it.
constexpr uint32_t kTableBase = 0x10000;
constexpr int kRulePreference = 2000;
constexpr uint32_t kMaxPorts = 65535;  // conntrack zones are 16 bits

// Declares the table afresh (an earlier run's goes with its elements). Marks and zones are set
// in the raw hook, before conntrack looks a packet up: a port's flows live in its own zone.
constexpr std::string_view kRuleset = R"nft(
table inet fp_sled
delete table inet fp_sled
table inet fp_sled {
  map port4_in {
    type ipv4_addr : mark
  }
  map port6_in {
    type ipv6_addr : mark
  }
  map port4_blk {
    typeof ip daddr . @th,16,2 : meta mark
  }
  map port6_blk {
    typeof ip6 daddr . @th,16,2 : meta mark
  }
  map port_if {
    type ifname : mark
  }
  map zone_of {
    typeof meta mark : ct zone
  }
  map fip4_in {
    type ipv4_addr : ipv4_addr
  }
  map fip6_in {
    type ipv6_addr : ipv6_addr
  }
  map fip4_out {
    type ifname : ipv4_addr
  }
  map fip6_out {
    type ifname : ipv6_addr
  }
  map snat4 {
    type ifname : interval ipv4_addr . inet_service
  }
  map snat6_jump {
    type ifname : verdict
  }
  counter in_dnat { }
  counter in_unattached { }
  counter out_no_eip { }
  chain raw_pre {
    type filter hook prerouting priority raw; policy accept;
    udp dport 4789 notrack
    iifname "vx0" meta mark set ip daddr map @port4_in goto zone
    iifname "vx0" meta mark set ip6 daddr map @port6_in goto zone
    iifname "vx0" meta l4proto { tcp, udp } meta mark set ip daddr . @th,16,2 map @port4_blk goto zone
    iifname "vx0" icmp type echo-reply meta mark set ip daddr . @th,32,2 map @port4_blk goto zone
    iifname "vx0" icmp type { destination-unreachable, time-exceeded, parameter-problem } meta mark set ip daddr . @th,224,2 map @port4_blk goto zone
    iifname "vx0" meta l4proto { tcp, udp } meta mark set ip6 daddr . @th,16,2 map @port6_blk goto zone
    iifname "vx0" icmpv6 type echo-reply meta mark set ip6 daddr . @th,32,2 map @port6_blk goto zone
    iifname "vx0" icmpv6 type { destination-unreachable, packet-too-big, time-exceeded, parameter-problem } meta mark set ip6 daddr . @th,384,2 map @port6_blk goto zone
    iifname != "vx0" meta mark set iifname map @port_if goto zone
  }
  chain zone {
    ct zone set meta mark map @zone_of
  }
  chain raw_out {
    type filter hook output priority raw; policy accept;
    udp dport 4789 notrack
  }
  chain nat_in {
    type nat hook prerouting priority dstnat; policy accept;
    iifname "vx0" dnat ip to ip daddr map @fip4_in
    iifname "vx0" dnat ip6 to ip6 daddr map @fip6_in
  }
  chain forward_guard {
    type filter hook forward priority filter; policy accept;
    iifname "vx0" ct status dnat counter name in_dnat accept
    iifname "vx0" ct state established,related accept
    iifname "vx0" counter name in_unattached drop
  }
  chain nat_out {
    type nat hook postrouting priority srcnat; policy accept;
    oifname != "vx0" return
    snat ip to iifname map @fip4_out
    snat ip6 to iifname map @fip6_out
    meta l4proto { tcp, udp, icmp } snat ip to iifname map @snat4
    iifname vmap @snat6_jump
  }
  chain egress_guard {
    type filter hook postrouting priority srcnat + 10; policy accept;
    oifname "vx0" ct status dnat accept
    oifname "vx0" ct status snat accept
    oifname "vx0" counter name out_no_eip drop
  }
}
)nft";

Status Ip(std::vector<std::string> args) {
  args.insert(args.begin(), "ip");
  return RunCommand(args);
}

char V(const IpAddr& ip) { return ip.version() == IpVersion::kV4 ? '4' : '6'; }

bool Has(const std::vector<IpAddr>& list, const IpAddr& ip) {
  return std::find(list.begin(), list.end(), ip) != list.end();
}

std::optional<IpAddr> FirstOf(const std::vector<IpAddr>& list, IpVersion version) {
  for (const IpAddr& ip : list) {
    if (ip.version() == version) return ip;
  }
  return std::nullopt;
}

}  // namespace

Result<std::unique_ptr<SledPorts>> SledPorts::Open(const std::string& netns, const IpAddr& underlay,
                                                   const IpAddr& switch_underlay,
                                                   std::string vm_prefix) {
  auto thread = FP_TRY(NetnsThread::Start(netns));
  std::unique_ptr<SledPorts> sled(new SledPorts(std::move(thread), std::move(vm_prefix)));
  SledPorts* self = sled.get();
  FP_CHECK_OK(self->thread_->Run([&]() -> Status {
    self->nft_ = FP_TRY(Nftables::Open());
    FP_CHECK_OK(self->nft_->Run(std::string(kRuleset)));
    for (const char* family : {"-4", "-6"}) {
      while (Ip({family, "rule", "del", "pref", std::to_string(kRulePreference)})) {
      }
    }
    (void)Ip({"link", "del", "vx0"});
    FP_CHECK_OK(Ip({"link", "add", "vx0", "address", SledTunnelMac(underlay), "type", "vxlan",
                    "external", "dstport", std::to_string(kVxlanPort)}));
    FP_CHECK_OK(Ip({"link", "set", "vx0", "up"}));
    for (const auto& [family, next_hop] :
         {std::pair<std::string, std::string_view>{"-4", kSwitchNextHop4},
          {"-6", kSwitchNextHop6}}) {
      FP_CHECK_OK(Ip({family, "neigh", "replace", std::string(next_hop), "lladdr",
                      std::string(kSwitchTunnelMac), "dev", "vx0", "nud", "permanent"}));
      FP_CHECK_OK(Ip({family, "route", "replace", "default", "via", std::string(next_hop), "dev",
                      "vx0", "onlink", "encap", "ip6", "id", std::to_string(kBoundaryVni), "src",
                      underlay.ToString(), "dst", switch_underlay.ToString(), "csum"}));
    }
    return Ok();
  }));
  return sled;
}

SledPorts::~SledPorts() {
  std::vector<Uuid> ids;
  for (const auto& [id, port] : ports_) ids.push_back(id);
  for (const Uuid& id : ids) (void)RemovePort(id);
  if (thread_) {
    (void)thread_->Run([this]() -> Status {
      nft_.reset();
      return Ok();
    });
  }
}

std::string SledPorts::VmNamespace(const Uuid& id) const {
  return fmt::format("{}-vm-{}", vm_prefix_, id.ToString().substr(0, 8));
}

uint32_t SledPorts::FreeNumber() const {
  std::vector<bool> used(ports_.size() + 2, false);
  for (const auto& [id, port] : ports_) {
    if (port.n < used.size()) used[port.n] = true;
  }
  uint32_t n = 1;
  while (used[n]) ++n;
  return n;
}

Status SledPorts::Plumb(const Port& port) {
  const std::string n = std::to_string(port.n);
  const std::string table = std::to_string(kTableBase + port.n);
  (void)Ip({"netns", "del", port.netns});  // a namespace an earlier run left
  FP_CHECK_OK(Ip({"netns", "add", port.netns}));
  FP_CHECK_OK(
      Ip({"link", "add", port.veth, "type", "veth", "peer", "name", "eth0", "netns", port.netns}));
  FP_CHECK_OK(Ip({"addr", "add", std::string(kGateway4) + "/32", "dev", port.veth}));
  FP_CHECK_OK(Ip({"-6", "addr", "add", std::string(kGateway6) + "/64", "dev", port.veth, "nodad"}));
  FP_CHECK_OK(Ip({"link", "set", port.veth, "up"}));
  FP_CHECK_OK(Ip({"-n", port.netns, "link", "set", "lo", "up"}));
  FP_CHECK_OK(Ip({"-n", port.netns, "link", "set", "eth0", "up"}));
  for (const char* family : {"-4", "-6"}) {
    FP_CHECK_OK(Ip({family, "route", "replace", "default", "dev", port.veth, "table", table}));
    FP_CHECK_OK(Ip({family, "rule", "add", "pref", std::to_string(kRulePreference), "iif", "vx0",
                    "fwmark", n, "lookup", table}));
  }
  if (const auto& v4 = port.private_ips.v4) {
    FP_CHECK_OK(Ip({"-n", port.netns, "addr", "add", v4->ToString() + "/32", "dev", "eth0"}));
    FP_CHECK_OK(Ip({"-n", port.netns, "route", "add", std::string(kGateway4), "dev", "eth0"}));
    FP_CHECK_OK(Ip({"-n", port.netns, "route", "add", "default", "via", std::string(kGateway4)}));
  }
  if (const auto& v6 = port.private_ips.v6) {
    FP_CHECK_OK(Ip(
        {"-n", port.netns, "-6", "addr", "add", v6->ToString() + "/128", "dev", "eth0", "nodad"}));
    FP_CHECK_OK(Ip({"-n", port.netns, "-6", "route", "add", "default", "via",
                    std::string(kGateway6), "dev", "eth0"}));
  }
  return nft_->Run(
      fmt::format("add element inet fp_sled port_if {{ \"{0}\" : {1} }}\n"
                  "add element inet fp_sled zone_of {{ {1} : {1} }}\n",
                  port.veth, port.n));
}

Status SledPorts::AddPort(const Uuid& id, const std::string& hostname,
                          const PrivateIps& private_ips) {
  const auto* v4 = private_ips.v4 ? &*private_ips.v4 : nullptr;
  const auto* v6 = private_ips.v6 ? &*private_ips.v6 : nullptr;
  if ((!v4 && !v6) || (v4 && v4->version() != IpVersion::kV4) ||
      (v6 && v6->version() != IpVersion::kV6)) {
    return Fail(Error::InvalidRequest(fmt::format(
        "instance {}: a port needs a private IPv4 address, an IPv6 one, or both", id.ToString())));
  }
  if (auto it = ports_.find(id); it != ports_.end()) {
    const PrivateIps& had = it->second.private_ips;
    if (had.v4 == private_ips.v4 && had.v6 == private_ips.v6) return Ok();
    return Fail(Error::InvalidRequest(
        fmt::format("instance {}: its port exists with other private addresses", id.ToString())));
  }
  if (ports_.size() >= kMaxPorts) {
    return Fail(Error::InsufficientCapacity(
        fmt::format("this sled holds {} ports, the most it can", kMaxPorts)));
  }
  Port port;
  port.n = FreeNumber();
  port.netns = VmNamespace(id);
  port.veth = "vm" + id.ToString().substr(0, 8);
  port.private_ips = private_ips;
  FP_CHECK_OK(thread_->Run([&]() -> Status { return Plumb(port); }));
  port.responder = FP_TRY(Responder::Start(port.netns, hostname));
  ports_.emplace(id, std::move(port));
  return Ok();
}

Status SledPorts::SetExternalIps(const Uuid& id, const std::vector<IpAddr>& one_to_one,
                                 const std::optional<SnatBlock>& snat,
                                 const std::optional<SnatBlock>& snat6) {
  auto it = ports_.find(id);
  if (it == ports_.end()) return Fail(Error::NotFoundById("instance", id.ToString()));
  const PrivateIps& own = it->second.private_ips;
  for (const IpAddr& ip : one_to_one) {
    if (!(ip.version() == IpVersion::kV4 ? own.v4 : own.v6)) {
      return Fail(Error::InvalidRequest(fmt::format(
          "external address {}: instance {} has no private IPv{} address to carry it to",
          ip.ToString(), id.ToString(), V(ip))));
    }
  }
  for (const auto& [block, version] :
       {std::pair{&snat, IpVersion::kV4}, {&snat6, IpVersion::kV6}}) {
    if (!*block) continue;
    const SnatBlock& b = **block;
    const char v = version == IpVersion::kV4 ? '4' : '6';
    bool aligned = b.first_port % kBlockPorts == 0 &&
                   b.last_port == b.first_port + kBlockPorts - 1 && b.first_port >= 0 &&
                   b.last_port <= 65535;
    if (b.ip.version() != version || !(version == IpVersion::kV4 ? own.v4 : own.v6) || !aligned) {
      return Fail(Error::InvalidRequest(fmt::format(
          "SNAT {} ports {}-{} for instance {}: a port's IPv{} SNAT is an IPv{} address and an "
          "aligned block of {} ports, for a port with a private IPv{} address",
          b.ip.ToString(), b.first_port, b.last_port, id.ToString(), v, v, kBlockPorts, v)));
    }
  }
  return Reconfigure(it->second, one_to_one, snat, snat6);
}

Status SledPorts::Reconfigure(Port& port, const std::vector<IpAddr>& one_to_one,
                              const std::optional<SnatBlock>& snat,
                              const std::optional<SnatBlock>& snat6) {
  std::string commands;
  std::vector<IpAddr> lost;
  for (const IpAddr& ip : port.one_to_one) {
    if (!Has(one_to_one, ip)) {
      commands += fmt::format(
          "delete element inet fp_sled fip{0}_in {{ {1} }}\n"
          "delete element inet fp_sled port{0}_in {{ {1} }}\n",
          V(ip), ip.ToString());
      lost.push_back(ip);
    }
  }
  for (const IpAddr& ip : one_to_one) {
    if (!Has(port.one_to_one, ip)) {
      const IpAddr& private_ip =
          ip.version() == IpVersion::kV4 ? *port.private_ips.v4 : *port.private_ips.v6;
      commands += fmt::format(
          "add element inet fp_sled fip{0}_in {{ {1} : {2} }}\n"
          "add element inet fp_sled port{0}_in {{ {1} : {3} }}\n",
          V(ip), ip.ToString(), private_ip.ToString(), port.n);
    }
  }
  // The outbound source of each version: the first 1:1 address (replaced whole when it changes).
  for (IpVersion version : {IpVersion::kV4, IpVersion::kV6}) {
    std::optional<IpAddr> before = FirstOf(port.one_to_one, version);
    std::optional<IpAddr> after = FirstOf(one_to_one, version);
    if (before == after) continue;
    char v = version == IpVersion::kV4 ? '4' : '6';
    if (before) {
      commands += fmt::format("delete element inet fp_sled fip{}_out {{ \"{}\" }}\n", v, port.veth);
    }
    if (after) {
      commands += fmt::format("add element inet fp_sled fip{}_out {{ \"{}\" : {} }}\n", v,
                              port.veth, after->ToString());
    }
  }
  std::vector<IpAddr> lost_snat;
  if (port.snat != snat) {
    if (const auto& old = port.snat) {
      commands += fmt::format(
          "delete element inet fp_sled snat4 {{ \"{}\" }}\n"
          "delete element inet fp_sled port4_blk {{ {} . {} }}\n",
          port.veth, old->ip.ToString(), old->first_port / kBlockPorts);
      lost_snat.push_back(old->ip);
    }
    if (snat) {
      commands += fmt::format(
          "add element inet fp_sled snat4 {{ \"{}\" : {} . {}-{} }}\n"
          "add element inet fp_sled port4_blk {{ {} . {} : {} }}\n",
          port.veth, snat->ip.ToString(), snat->first_port, snat->last_port, snat->ip.ToString(),
          snat->first_port / kBlockPorts, port.n);
    }
  }
  // IPv6 SNAT by a chain of the port's own, jumped to by its veth: nft 1.0.6 cannot make the
  // IPv6 twin of the snat4 map (an interval map of address . ports refuses IPv6 NAT, ENODATA).
  if (port.snat6 != snat6) {
    const std::string chain = "s6_" + port.veth;
    if (const auto& old = port.snat6) {
      commands += fmt::format("delete element inet fp_sled port6_blk {{ {} . {} }}\n",
                              old->ip.ToString(), old->first_port / kBlockPorts);
      commands += snat6 ? fmt::format("flush chain inet fp_sled {}\n", chain)
                        : fmt::format(
                              "delete element inet fp_sled snat6_jump {{ \"{0}\" }}\n"
                              "flush chain inet fp_sled {1}\ndelete chain inet fp_sled {1}\n",
                              port.veth, chain);
      lost_snat.push_back(old->ip);
    }
    if (snat6) {
      if (!port.snat6) {
        commands += fmt::format(
            "add chain inet fp_sled {0}\n"
            "add element inet fp_sled snat6_jump {{ \"{1}\" : jump {0} }}\n",
            chain, port.veth);
      }
      commands += fmt::format(
          "add rule inet fp_sled {0} meta l4proto {{ tcp, udp, icmpv6 }} snat ip6 to "
          "[{1}]:{2}-{3}\n"
          "add element inet fp_sled port6_blk {{ {1} . {4} : {5} }}\n",
          chain, snat6->ip.ToString(), snat6->first_port, snat6->last_port,
          snat6->first_port / kBlockPorts, port.n);
    }
  }
  if (commands.empty()) return Ok();
  const auto zone = static_cast<uint16_t>(port.n);
  FP_CHECK_OK(thread_->Run([&]() -> Status {
    FP_CHECK_OK(nft_->Run(commands));
    // The maps first, then the flows they made: no new flow can be set up for a lost address.
    lost.insert(lost.end(), lost_snat.begin(), lost_snat.end());
    FP_TRY(FlushConntrack(lost, zone));
    return Ok();
  }));
  port.one_to_one = one_to_one;
  port.snat = snat;
  port.snat6 = snat6;
  return Ok();
}

int64_t SledPorts::Answered(const Uuid& id) const {
  auto it = ports_.find(id);
  if (it == ports_.end() || !it->second.responder) return -1;
  return it->second.responder->answered();
}

Status SledPorts::Configure(const InstanceSpec& spec) {
  FP_CHECK_OK(AddPort(spec.id,
                      spec.hostname.empty() ? spec.id.ToString().substr(0, 8) : spec.hostname,
                      PrivateIps{spec.private_ipv4, spec.private_ipv6}));
  std::optional<SnatBlock> snat, snat6;
  if (spec.snat_ip) snat = SnatBlock{*spec.snat_ip, spec.snat_first_port, spec.snat_last_port};
  if (spec.snat6_ip) {
    snat6 = SnatBlock{*spec.snat6_ip, spec.snat6_first_port, spec.snat6_last_port};
  }
  return SetExternalIps(spec.id, spec.external_ips, snat, snat6);
}

Status SledPorts::RemovePort(const Uuid& id) {
  auto it = ports_.find(id);
  if (it == ports_.end()) return Ok();
  Port& port = it->second;
  FP_CHECK_OK(Reconfigure(port, {}, std::nullopt, std::nullopt));
  port.responder.reset();
  FP_CHECK_OK(thread_->Run([&]() -> Status {
    FP_CHECK_OK(
        nft_->Run(fmt::format("delete element inet fp_sled port_if {{ \"{0}\" }}\n"
                              "delete element inet fp_sled zone_of {{ {1} }}\n",
                              port.veth, port.n)));
    const std::string table = std::to_string(kTableBase + port.n);
    for (const char* family : {"-4", "-6"}) {
      (void)Ip({family, "rule", "del", "pref", std::to_string(kRulePreference), "iif", "vx0",
                "fwmark", std::to_string(port.n), "lookup", table});
      (void)Ip({family, "route", "flush", "table", table});
    }
    (void)Ip({"link", "del", port.veth});
    return Ip({"netns", "del", port.netns});
  }));
  ports_.erase(it);
  return Ok();
}

}  // namespace fp::agents::dataplane
