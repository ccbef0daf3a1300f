#include "agents/linux/sled_ports.h"

#include <fmt/format.h>

#include <algorithm>

#include "agents/linux/conntrack.h"
#include "agents/linux/tunnel.h"

namespace fp::agents::dataplane {

namespace {

constexpr std::string_view kGateway = "169.254.169.1";
constexpr int kBoundaryVni = 99;

constexpr std::string_view kRuleset = R"nft(
table inet fp_sled
delete table inet fp_sled
table inet fp_sled {
  map fip4_in {
    type ipv4_addr : ipv4_addr
  }
  map fip4_out {
    type ipv4_addr : ipv4_addr
  }
  map snat4 {
    type ipv4_addr : interval ipv4_addr . inet_service
  }
  set ports4 {
    type ipv4_addr
  }
  counter in_dnat { }
  counter in_unattached { }
  counter out_no_eip { }
  chain raw_pre {
    type filter hook prerouting priority raw; policy accept;
    udp dport 4789 notrack
  }
  chain raw_out {
    type filter hook output priority raw; policy accept;
    udp dport 4789 notrack
  }
  chain nat_in {
    type nat hook prerouting priority dstnat; policy accept;
    iifname "vx0" dnat ip to ip daddr map @fip4_in
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
    snat ip to ip saddr map @fip4_out
    meta l4proto { tcp, udp } snat ip to ip saddr map @snat4
    meta l4proto icmp snat ip to ip saddr map @snat4
  }
  chain egress_guard {
    type filter hook postrouting priority srcnat + 10; policy accept;
    oifname "vx0" ip saddr @ports4 counter name out_no_eip drop
  }
}
)nft";

Status Ip(std::vector<std::string> args) {
  args.insert(args.begin(), "ip");
  return RunCommand(args);
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

Status SledPorts::AddPort(const Uuid& id, const std::string& hostname, const IpAddr& private_ip) {
  if (ports_.count(id) != 0) return Ok();
  if (private_ip.version() != IpVersion::kV4) {
    return Fail(Error::InvalidRequest(
        fmt::format("instance {}: this dataplane gives ports an IPv4 private address only, not {}",
                    id.ToString(), private_ip.ToString())));
  }
  Port port{VmNamespace(id), "vm" + id.ToString().substr(0, 8), private_ip, {}, {}, nullptr};
  const std::string priv = private_ip.ToString();
  FP_CHECK_OK(thread_->Run([&]() -> Status {
    (void)Ip({"netns", "del", port.netns});  // a namespace an earlier run left
    FP_CHECK_OK(Ip({"netns", "add", port.netns}));
    FP_CHECK_OK(Ip(
        {"link", "add", port.veth, "type", "veth", "peer", "name", "eth0", "netns", port.netns}));
    FP_CHECK_OK(Ip({"addr", "add", std::string(kGateway) + "/32", "dev", port.veth}));
    FP_CHECK_OK(Ip({"link", "set", port.veth, "up"}));
    FP_CHECK_OK(Ip({"route", "add", priv + "/32", "dev", port.veth}));
    FP_CHECK_OK(Ip({"-n", port.netns, "link", "set", "lo", "up"}));
    FP_CHECK_OK(Ip({"-n", port.netns, "addr", "add", priv + "/32", "dev", "eth0"}));
    FP_CHECK_OK(Ip({"-n", port.netns, "link", "set", "eth0", "up"}));
    FP_CHECK_OK(Ip({"-n", port.netns, "route", "add", std::string(kGateway), "dev", "eth0"}));
    FP_CHECK_OK(Ip({"-n", port.netns, "route", "add", "default", "via", std::string(kGateway)}));
    return nft_->Run(fmt::format("add element inet fp_sled ports4 {{ {} }}\n", priv));
  }));
  port.responder = FP_TRY(Responder::Start(port.netns, hostname));
  ports_.emplace(id, std::move(port));
  return Ok();
}

Status SledPorts::SetExternalIps(const Uuid& id, const std::vector<IpAddr>& one_to_one,
                                 const std::optional<SnatBlock>& snat) {
  auto it = ports_.find(id);
  if (it == ports_.end()) return Fail(Error::NotFoundById("instance", id.ToString()));
  for (const IpAddr& ip : one_to_one) {
    if (ip.version() != IpVersion::kV4) {
      return Fail(Error::InvalidRequest(fmt::format(
          "external address {}: this dataplane carries IPv4 external addresses only so far",
          ip.ToString())));
    }
  }
  return Reconfigure(it->second, one_to_one, snat);
}

Status SledPorts::Reconfigure(Port& port, const std::vector<IpAddr>& one_to_one,
                              const std::optional<SnatBlock>& snat) {
  const std::string priv = port.private_ip.ToString();
  std::string commands;
  std::vector<IpAddr> lost;
  for (const IpAddr& ip : port.one_to_one) {
    if (std::find(one_to_one.begin(), one_to_one.end(), ip) == one_to_one.end()) {
      commands += fmt::format("delete element inet fp_sled fip4_in {{ {} }}\n", ip.ToString());
      lost.push_back(ip);
    }
  }
  for (const IpAddr& ip : one_to_one) {
    if (std::find(port.one_to_one.begin(), port.one_to_one.end(), ip) == port.one_to_one.end()) {
      commands +=
          fmt::format("add element inet fp_sled fip4_in {{ {} : {} }}\n", ip.ToString(), priv);
    }
  }
  // The outbound source: the first 1:1 address (replaced whole when it changes).
  std::optional<IpAddr> out_before;
  if (!port.one_to_one.empty()) out_before = port.one_to_one.front();
  std::optional<IpAddr> out_after;
  if (!one_to_one.empty()) out_after = one_to_one.front();
  if (out_before != out_after) {
    if (out_before)
      commands += fmt::format("delete element inet fp_sled fip4_out {{ {} }}\n", priv);
    if (out_after) {
      commands += fmt::format("add element inet fp_sled fip4_out {{ {} : {} }}\n", priv,
                              out_after->ToString());
    }
  }
  if (port.snat != snat) {
    if (port.snat) commands += fmt::format("delete element inet fp_sled snat4 {{ {} }}\n", priv);
    if (snat) {
      commands += fmt::format("add element inet fp_sled snat4 {{ {} : {} . {}-{} }}\n", priv,
                              snat->ip.ToString(), snat->first_port, snat->last_port);
    }
  }
  if (commands.empty()) return Ok();
  std::optional<SnatBlock> lost_snat =
      port.snat && port.snat != snat ? port.snat : std::optional<SnatBlock>();
  FP_CHECK_OK(thread_->Run([&]() -> Status {
    FP_CHECK_OK(nft_->Run(commands));
    // The map first, then the flows it made: no new flow can be set up for a lost address.
    for (const IpAddr& ip : lost) FP_TRY(FlushConntrack(ip));
    if (lost_snat) FP_TRY(FlushConntrack(lost_snat->ip, port.private_ip));
    return Ok();
  }));
  port.one_to_one = one_to_one;
  port.snat = snat;
  return Ok();
}

int64_t SledPorts::Answered(const Uuid& id) const {
  auto it = ports_.find(id);
  if (it == ports_.end() || !it->second.responder) return -1;
  return it->second.responder->answered();
}

Status SledPorts::Configure(const InstanceSpec& spec) {
  if (!spec.private_ipv4) {
    return Fail(Error::InvalidRequest(fmt::format(
        "instance {}: this dataplane needs a private IPv4 address on the primary interface",
        spec.id.ToString())));
  }
  FP_CHECK_OK(AddPort(spec.id,
                      spec.hostname.empty() ? spec.id.ToString().substr(0, 8) : spec.hostname,
                      *spec.private_ipv4));
  std::optional<SnatBlock> snat;
  if (spec.snat_ip) snat = SnatBlock{*spec.snat_ip, spec.snat_first_port, spec.snat_last_port};
  return SetExternalIps(spec.id, spec.external_ips, snat);
}

Status SledPorts::RemovePort(const Uuid& id) {
  auto it = ports_.find(id);
  if (it == ports_.end()) return Ok();
  Port& port = it->second;
  FP_CHECK_OK(Reconfigure(port, {}, std::nullopt));
  port.responder.reset();
  FP_CHECK_OK(thread_->Run([&]() -> Status {
    FP_CHECK_OK(nft_->Run(
        fmt::format("delete element inet fp_sled ports4 {{ {} }}\n", port.private_ip.ToString())));
    (void)Ip({"link", "del", port.veth});
    return Ip({"netns", "del", port.netns});
  }));
  ports_.erase(it);
  return Ok();
}

}  // namespace fp::agents::dataplane
