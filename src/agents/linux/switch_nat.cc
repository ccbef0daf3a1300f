#include "agents/linux/switch_nat.h"

#include <fmt/format.h>

#include <algorithm>

#include "agents/linux/tunnel.h"

namespace fp::agents::dataplane {

namespace {

constexpr int kBlockPorts = 16384;
constexpr uint32_t kFirstMark = 0x100;

// Declares the table afresh: an earlier run's table (and every element in it) goes first, so
// that the agent and the kernel start from the same empty table. The steer chain is the
// study's, with IPv6 full-range entries added.
constexpr std::string_view kRuleset = R"nft(
table inet fp_switch
delete table inet fp_switch
table inet fp_switch {
  map ext4 {
    type ipv4_addr : mark
  }
  map ext6 {
    type ipv6_addr : mark
  }
  map blk4 {
    typeof ip daddr . @th,32,2 : meta mark
  }
  map blk6 {
    typeof ip6 daddr . @th,32,2 : meta mark
  }
  counter steered { }
  counter steered_icmp_err { }
  chain steer {
    type filter hook prerouting priority mangle; policy accept;
    meta mark set ip daddr map @ext4 counter name steered accept
    meta mark set ip6 daddr map @ext6 counter name steered accept
    meta l4proto { tcp, udp } meta mark set ip daddr . @th,16,2 map @blk4 counter name steered accept
    icmp type echo-reply meta mark set ip daddr . @th,32,2 map @blk4 counter name steered accept
    icmp type { destination-unreachable, time-exceeded, parameter-problem } meta mark set ip daddr . @th,224,2 map @blk4 counter name steered_icmp_err accept
    meta l4proto { tcp, udp } meta mark set ip6 daddr . @th,16,2 map @blk6 counter name steered accept
    icmpv6 type echo-reply meta mark set ip6 daddr . @th,32,2 map @blk6 counter name steered accept
    icmpv6 type { destination-unreachable, packet-too-big, time-exceeded, parameter-problem } meta mark set ip6 daddr . @th,384,2 map @blk6 counter name steered_icmp_err accept
  }
}
)nft";

}  // namespace

Result<std::unique_ptr<SwitchNat>> SwitchNat::Open(const std::string& netns,
                                                   std::optional<IpAddr> underlay) {
  if (underlay && underlay->version() != IpVersion::kV6) {
    return Fail(Error::InvalidRequest(
        fmt::format("the switch's underlay address {} is not IPv6", underlay->ToString())));
  }
  // The thread first: FP_TRY inside the new-expression would return after its allocation.
  auto thread = FP_TRY(NetnsThread::Start(netns));
  std::unique_ptr<SwitchNat> nat(new SwitchNat(std::move(thread), underlay));
  SwitchNat* self = nat.get();
  FP_CHECK_OK(self->thread_->Run([self]() -> Status {
    self->nft_ = FP_TRY(Nftables::Open());
    FP_CHECK_OK(self->nft_->Run(std::string(kRuleset)));
    return self->underlay_ ? self->ResetTunnels() : Ok();
  }));
  return nat;
}

Status SwitchNat::ResetTunnels() {
  // The rules of an earlier run (preferences 1000-1999) and its vx0 go; the tables they named
  // are refilled with `replace` as targets appear again.
  for (const char* family : {"-4", "-6"}) {
    for (int pref = 1000; pref < 2000; ++pref) {
      if (!RunCommand({"ip", family, "rule", "del", "pref", std::to_string(pref)})) break;
    }
  }
  // The tunnels' own (outer) packets carry the inner packet's mark into their route lookup, where
  // the IPv6 mark rules would send them into vx0 again: locally sent packets look up the main
  // table (the underlay's routes) first.
  (void)RunCommand({"ip", "-6", "rule", "del", "pref", "999"});
  FP_CHECK_OK(
      RunCommand({"ip", "-6", "rule", "add", "pref", "999", "iif", "lo", "lookup", "main"}));
  (void)RunCommand({"ip", "link", "del", "vx0"});
  FP_CHECK_OK(RunCommand({"ip", "link", "add", "vx0", "address", std::string(kSwitchTunnelMac),
                          "type", "vxlan", "external", "dstport", std::to_string(kVxlanPort)}));
  return RunCommand({"ip", "link", "set", "vx0", "up"});
}

Status SwitchNat::MakeTunnel(const Target& target, uint32_t mark) {
  const uint32_t n = mark - kFirstMark;
  const std::string table = std::to_string(mark);
  const std::string pref = std::to_string(1000 + n);
  const std::string next_hop4 = fmt::format("169.254.{}.{}", 1 + n / 250, 1 + n % 250);
  const std::string next_hop6 = fmt::format("fe80::1:{:x}", n + 1);
  const std::string mac = SledTunnelMac(target.first);
  const std::string vni = std::to_string(target.second);
  const std::string sled = target.first.ToString();
  const std::string source = underlay_->ToString();
  for (const auto& [family, next_hop] :
       {std::pair<std::string, std::string>{"-4", next_hop4}, {"-6", next_hop6}}) {
    FP_CHECK_OK(RunCommand({"ip", family, "neigh", "replace", next_hop, "lladdr", mac, "dev", "vx0",
                            "nud", "permanent"}));
    FP_CHECK_OK(RunCommand({"ip",  family, "route",  "replace", "default", "via",   next_hop,
                            "dev", "vx0",  "onlink", "encap",   "ip6",     "id",    vni,
                            "src", source, "dst",    sled,      "csum",    "table", table}));
    (void)RunCommand({"ip", family, "rule", "del", "pref", pref});
    FP_CHECK_OK(
        RunCommand({"ip", family, "rule", "add", "pref", pref, "fwmark", table, "lookup", table}));
  }
  return Ok();
}

SwitchNat::~SwitchNat() {
  // The context is freed on the thread that made it (its socket is that namespace's).
  if (thread_)
    (void)thread_->Run([this]() -> Status {
      nft_.reset();
      return Ok();
    });
}

Status SwitchNat::CheckEntry(const NatEntry& e) {
  if (e.first_port == 0 && e.last_port == 65535) return Ok();
  bool block = e.first_port % kBlockPorts == 0 && e.last_port == e.first_port + kBlockPorts - 1 &&
               e.first_port >= 0 && e.last_port <= 65535;
  if (!block) {
    return Fail(Error::InvalidRequest(fmt::format(
        "NAT entry {} ports {}-{}: the switch holds ports 0-65535 or an aligned block of {} "
        "ports",
        e.external_ip.ToString(), e.first_port, e.last_port, kBlockPorts)));
  }
  return Ok();
}

SwitchNat::Key SwitchNat::KeyOf(const NatEntry& e) {
  if (e.first_port != 0 || e.last_port != 65535) {
    return Key{e.external_ip.version() == IpVersion::kV4 ? "blk4" : "blk6",
               fmt::format("{} . {}", e.external_ip.ToString(), e.first_port / kBlockPorts)};
  }
  return Key{e.external_ip.version() == IpVersion::kV4 ? "ext4" : "ext6", e.external_ip.ToString()};
}

Result<uint32_t> SwitchNat::MarkFor(const NatEntry& e) {
  Target target{e.sled_address, e.vni};
  auto it = marks_.find(target);
  if (it != marks_.end()) return it->second;
  uint32_t mark = kFirstMark + static_cast<uint32_t>(marks_.size());
  if (underlay_) {
    FP_CHECK_OK(thread_->Run([&]() -> Status { return MakeTunnel(target, mark); }));
  }
  marks_.emplace(target, mark);
  return mark;
}

std::optional<uint32_t> SwitchNat::MarkOf(const IpAddr& sled, int64_t vni) const {
  auto it = marks_.find(Target{sled, vni});
  if (it == marks_.end()) return std::nullopt;
  return it->second;
}

std::string SwitchNat::Diff(const Change& change) const {
  std::string deletions, additions;
  for (const auto& [key, mark] : change) {
    auto it = installed_.find(key);
    const bool had = it != installed_.end();
    // A retarget is a deletion and an addition in the same transaction: never a gap.
    if (had && mark != it->second) {
      deletions += fmt::format("delete element inet fp_switch {} {{ {} }}\n", key.map, key.key);
    }
    if (mark && (!had || it->second != *mark)) {
      additions +=
          fmt::format("add element inet fp_switch {} {{ {} : {:#x} }}\n", key.map, key.key, *mark);
    }
  }
  return deletions + additions;
}

Status SwitchNat::CommitWhole(std::map<Key, uint32_t> next) {
  const std::string commands = Whole(next);
  FP_CHECK_OK(thread_->Run([&]() -> Status { return nft_->Run(commands); }));
  installed_ = std::move(next);
  return Ok();
}

std::string SwitchNat::Whole(const std::map<Key, uint32_t>& next) {
  std::string commands =
      "flush map inet fp_switch ext4\nflush map inet fp_switch ext6\n"
      "flush map inet fp_switch blk4\nflush map inet fp_switch blk6\n";
  for (const auto& [key, mark] : next) {
    commands +=
        fmt::format("add element inet fp_switch {} {{ {} : {:#x} }}\n", key.map, key.key, mark);
  }
  return commands;
}

Status SwitchNat::Apply(const std::vector<NatEntry>& removed,
                        const std::vector<NatEntry>& installed) {
  for (const NatEntry& e : installed) FP_CHECK_OK(CheckEntry(e));
  Change change;
  for (const NatEntry& e : removed) change[KeyOf(e)] = std::nullopt;
  for (const NatEntry& e : installed) change[KeyOf(e)] = FP_TRY(MarkFor(e));
  const std::string commands = Diff(change);
  if (commands.empty()) return Ok();
  if (thread_->Run([&]() -> Status { return nft_->Run(commands); })) {
    for (const auto& [key, mark] : change) {
      if (mark) {
        installed_[key] = *mark;
      } else {
        installed_.erase(key);
      }
    }
    return Ok();
  }
  // The kernel's maps are not what this agent believes (someone changed them): refill them
  // whole, so that the next change does not trip over the same difference.
  std::map<Key, uint32_t> next = installed_;
  for (const auto& [key, mark] : change) {
    if (mark) {
      next[key] = *mark;
    } else {
      next.erase(key);
    }
  }
  return CommitWhole(std::move(next));
}

Status SwitchNat::ReplaceAll(const std::vector<NatEntry>& entries) {
  std::map<Key, uint32_t> next;
  for (const NatEntry& e : entries) {
    FP_CHECK_OK(CheckEntry(e));
    next[KeyOf(e)] = FP_TRY(MarkFor(e));
  }
  return CommitWhole(std::move(next));
}

Result<std::vector<std::string>> SwitchNat::Dump() {
  std::vector<std::string> out;
  FP_CHECK_OK(thread_->Run([&]() -> Status {
    for (std::string_view map : {"ext4", "ext6", "blk4", "blk6"}) {
      nlohmann::json j = FP_TRY(nft_->ListJson(fmt::format("list map inet fp_switch {}", map)));
      for (const auto& item : j.value("nftables", nlohmann::json::array())) {
        if (!item.contains("map")) continue;
        for (const auto& elem : item["map"].value("elem", nlohmann::json::array())) {
          // [key, mark]: the key an address, or {"concat": [address, block]}.
          if (!elem.is_array() || elem.size() != 2) continue;
          std::string key;
          if (elem[0].is_object() && elem[0].contains("concat")) {
            const auto& parts = elem[0]["concat"];
            key = fmt::format("{} . {}", parts.at(0).get<std::string>(), parts.at(1).dump());
          } else {
            key = elem[0].get<std::string>();
          }
          out.push_back(fmt::format("{} {} -> {:#x}", map, key, elem[1].get<uint32_t>()));
        }
      }
    }
    return Ok();
  }));
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace fp::agents::dataplane
