// Real packets through the Linux dataplane (issue 13): a lab (scripts/lab) with the switch's NAT
// maps and tunnels (SwitchNat) and two sleds' ports (SledPorts), programmed as the attach and
// detach sagas do (switch first, then sled). Needs root: skipped without it.

#include <gtest/gtest.h>
#include <unistd.h>

#include "agents/linux/sled_ports.h"
#include "agents/linux/switch_nat.h"
#include "agents/testing/lab.h"
#include "common/testing/ip.h"

namespace fp::agents::dataplane {
namespace {

using fp::agents::testing::Fetch;
using fp::agents::testing::InNs;
using fp::agents::testing::Lab;

using fp::testing::Ip;

const Uuid kVmA = *Uuid::Parse("aaaaaaaa-0000-4000-8000-000000000001");
const Uuid kVmB = *Uuid::Parse("bbbbbbbb-0000-4000-8000-000000000002");
const Uuid kVmC = *Uuid::Parse("cccccccc-0000-4000-8000-000000000003");

class DataplaneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces, nftables)";
    ASSERT_TRUE(lab_.ok()) << lab_.error();
    switch_ = SwitchNat::Open(lab_.ns("sw"), Ip("2001:db8:ff::1")).value();
    for (int i = 0; i < 2; ++i) {
      auto sled = SledPorts::Open(lab_.ns("sled" + std::to_string(i)), Ip(kSleds[i]),
                                  Ip("2001:db8:ff::1"), lab_.ns("sled" + std::to_string(i)));
      ASSERT_TRUE(sled) << sled.error().message();
      sleds_.push_back(std::move(*sled));
    }
    ASSERT_TRUE(sleds_[0]->AddPort(kVmA, "vm-a", {Ip("172.30.0.10"), Ip("fd00:0:0:400::10")}));
    ASSERT_TRUE(sleds_[1]->AddPort(kVmB, "vm-b", {Ip("172.30.0.11"), Ip("fd00:0:0:400::11")}));
  }
  NatEntry Entry(const std::string& ip, int sled, int first = 0, int last = 65535) {
    return NatEntry{Ip(ip), first, last, Ip(kSleds[sled]), 10, "a8:40:25:00:00:01"};
  }
  // As the attach saga: the switch, then the sled.
  void Attach(const std::string& ip, int sled, const Uuid& vm) {
    ASSERT_TRUE(switch_->Apply({}, {Entry(ip, sled)}));
    ASSERT_TRUE(sleds_[sled]->SetExternalIps(vm, {Ip(ip)}, std::nullopt));
  }
  void Detach(const std::string& ip, int sled, const Uuid& vm) {
    ASSERT_TRUE(switch_->Apply({Entry(ip, sled)}, {}));
    ASSERT_TRUE(sleds_[sled]->SetExternalIps(vm, {}, std::nullopt));
  }

  static constexpr const char* kSleds[2] = {"2001:db8:10::1", "2001:db8:11::1"};
  Lab lab_{"fpdp"};
  std::unique_ptr<SwitchNat> switch_;
  std::vector<std::unique_ptr<SledPorts>> sleds_;
};

TEST_F(DataplaneTest, AnAttachedAddressCarriesTcpUdpAndPingToItsInstanceUntilDetached) {
  EXPECT_FALSE(Fetch(lab_.ns("ext"), "203.0.113.10", 80)) << "nothing attached yet";
  Attach("203.0.113.10", 0, kVmA);
  auto tcp = Fetch(lab_.ns("ext"), "203.0.113.10", 80);
  ASSERT_TRUE(tcp) << tcp.error().message();
  // The instance sees the client's real address.
  EXPECT_EQ(tcp->substr(0, tcp->find(':')), "host=vm-a client=192.0.2.10");
  auto udp = Fetch(lab_.ns("ext"), "203.0.113.10", 80, /*udp=*/true);
  ASSERT_TRUE(udp) << udp.error().message();
  EXPECT_EQ(udp->substr(0, udp->find(':')), "host=vm-a client=192.0.2.10");
  EXPECT_TRUE(InNs(lab_.ns("ext"), {"ping", "-c", "1", "-W", "2", "203.0.113.10"}));

  EXPECT_EQ(sleds_[0]->Answered(kVmA), 2) << "the TCP connection and the UDP datagram";

  Detach("203.0.113.10", 0, kVmA);
  EXPECT_FALSE(Fetch(lab_.ns("ext"), "203.0.113.10", 80));
  EXPECT_FALSE(Fetch(lab_.ns("ext"), "203.0.113.10", 80, /*udp=*/true));
  EXPECT_FALSE(InNs(lab_.ns("ext"), {"ping", "-c", "1", "-W", "1", "203.0.113.10"}));
  EXPECT_EQ(sleds_[0]->Answered(kVmA), 2) << "nothing more reached the instance";
}

TEST_F(DataplaneTest, AMovedAddressAnswersFromTheInstanceOnTheOtherSled) {
  Attach("203.0.113.10", 0, kVmA);
  ASSERT_TRUE(Fetch(lab_.ns("ext"), "203.0.113.10", 80));
  Detach("203.0.113.10", 0, kVmA);
  Attach("203.0.113.10", 1, kVmB);
  auto tcp = Fetch(lab_.ns("ext"), "203.0.113.10", 80);
  ASSERT_TRUE(tcp) << tcp.error().message();
  EXPECT_EQ(tcp->substr(0, tcp->find(':')), "host=vm-b client=192.0.2.10");
}

// The study's conntrack trap: a flow the sled tracked for the old owner would keep reaching it
// after the address moved to another instance on the same sled, unless the detach flushed it.
TEST_F(DataplaneTest, AFlowOfAMovedAddressNeverReachesItsOldOwner) {
  ASSERT_TRUE(sleds_[0]->AddPort(kVmC, "vm-c", {Ip("172.30.0.12"), std::nullopt}));
  Attach("203.0.113.10", 0, kVmA);
  // One UDP flow (the same source port each time): tracked by the sled, DNAT to vm-a.
  auto first = Fetch(lab_.ns("ext"), "203.0.113.10", 80, /*udp=*/true, 40000);
  ASSERT_TRUE(first) << first.error().message();
  EXPECT_EQ(first->substr(0, first->find(" client")), "host=vm-a");
  Detach("203.0.113.10", 0, kVmA);
  Attach("203.0.113.10", 0, kVmC);
  auto again = Fetch(lab_.ns("ext"), "203.0.113.10", 80, /*udp=*/true, 40000);
  ASSERT_TRUE(again) << again.error().message();
  EXPECT_EQ(again->substr(0, again->find(" client")), "host=vm-c");
}

TEST_F(DataplaneTest, OutboundUsesTheFloatingAddressElseTheSnatBlockElseNothing) {
  auto internet = Responder::Start(lab_.ns("ext"), "internet", 8080).value();
  // No external address: the instance cannot get out (the egress guard drops it).
  EXPECT_FALSE(Fetch(sleds_[0]->VmNamespace(kVmA), "192.0.2.20", 8080));

  // A SNAT block: out as the SNAT address with a port inside the block; the switch steers the
  // return traffic by the port's block.
  ASSERT_TRUE(switch_->Apply({}, {Entry("198.51.100.7", 0, 16384, 32767)}));
  ASSERT_TRUE(sleds_[0]->SetExternalIps(kVmA, {}, SnatBlock{Ip("198.51.100.7"), 16384, 32767}));
  auto snat = Fetch(sleds_[0]->VmNamespace(kVmA), "192.0.2.20", 8080);
  ASSERT_TRUE(snat) << snat.error().message();
  ASSERT_EQ(snat->substr(0, snat->rfind(':')), "host=internet client=198.51.100.7");
  int port = std::stoi(snat->substr(snat->rfind(':') + 1));
  EXPECT_GE(port, 16384);
  EXPECT_LE(port, 32767);

  // With a 1:1 address too, that one is the source.
  ASSERT_TRUE(switch_->Apply({}, {Entry("203.0.113.10", 0)}));
  ASSERT_TRUE(sleds_[0]->SetExternalIps(kVmA, {Ip("203.0.113.10")},
                                        SnatBlock{Ip("198.51.100.7"), 16384, 32767}));
  auto floating = Fetch(sleds_[0]->VmNamespace(kVmA), "192.0.2.20", 8080);
  ASSERT_TRUE(floating) << floating.error().message();
  EXPECT_EQ(floating->substr(0, floating->rfind(':')), "host=internet client=203.0.113.10");
}

// The switch steers what comes back to a SNAT address by the port block: for ICMP by the echo
// id, and for an ICMP error by the port of the packet it quotes. Both reach the instance.
TEST_F(DataplaneTest, AnInstanceBehindSnatGetsItsPingRepliesAndIcmpErrors) {
  ASSERT_TRUE(switch_->Apply({}, {Entry("198.51.100.7", 0, 16384, 32767)}));
  ASSERT_TRUE(sleds_[0]->SetExternalIps(kVmA, {}, SnatBlock{Ip("198.51.100.7"), 16384, 32767}));
  EXPECT_TRUE(InNs(sleds_[0]->VmNamespace(kVmA), {"ping", "-c", "1", "-W", "2", "192.0.2.20"}));
  // Nothing listens on UDP port 9 out there: the port-unreachable error must come back to the
  // instance's socket (refused at once, not silence until the timeout).
  auto refused = Fetch(sleds_[0]->VmNamespace(kVmA), "192.0.2.20", 9, /*udp=*/true);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("Connection refused"), std::string::npos)
      << refused.error().message();
}

// IPv6 SNAT (floatplane's, not Oxide's): a dual-stack instance goes out over IPv6 as its SNAT
// address with a port in its block, and what comes back (replies, ping replies, an ICMPv6
// error) is steered to it by the block, beside its IPv4 SNAT block.
TEST_F(DataplaneTest, ADualStackInstanceGoesOutOverIpv6AsItsSnatBlock) {
  auto internet = Responder::Start(lab_.ns("ext"), "internet", 8080).value();
  EXPECT_FALSE(Fetch(sleds_[0]->VmNamespace(kVmA), "2001:db8:e::10", 8080))
      << "no IPv6 address of any kind: nothing gets out";
  ASSERT_TRUE(switch_->Apply(
      {}, {Entry("198.51.100.7", 0, 16384, 32767), Entry("2001:db8:f100::7", 0, 32768, 49151)}));
  ASSERT_TRUE(sleds_[0]->SetExternalIps(kVmA, {}, SnatBlock{Ip("198.51.100.7"), 16384, 32767},
                                        SnatBlock{Ip("2001:db8:f100::7"), 32768, 49151}));
  auto v6 = Fetch(sleds_[0]->VmNamespace(kVmA), "2001:db8:e::10", 8080);
  ASSERT_TRUE(v6) << v6.error().message();
  ASSERT_EQ(v6->substr(0, v6->rfind(':')), "host=internet client=[2001:db8:f100::7]");
  int port = std::stoi(v6->substr(v6->rfind(':') + 1));
  EXPECT_GE(port, 32768);
  EXPECT_LE(port, 49151);
  auto v4 = Fetch(sleds_[0]->VmNamespace(kVmA), "192.0.2.20", 8080);
  ASSERT_TRUE(v4) << v4.error().message();
  EXPECT_EQ(v4->substr(0, v4->rfind(':')), "host=internet client=198.51.100.7");
  EXPECT_TRUE(InNs(sleds_[0]->VmNamespace(kVmA), {"ping", "-c", "1", "-W", "2", "2001:db8:e::10"}));
  auto refused = Fetch(sleds_[0]->VmNamespace(kVmA), "2001:db8:e::10", 9, /*udp=*/true);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("Connection refused"), std::string::npos)
      << refused.error().message();
  // The block taken away: nothing gets out over IPv6 any more.
  ASSERT_TRUE(sleds_[0]->SetExternalIps(kVmA, {}, SnatBlock{Ip("198.51.100.7"), 16384, 32767}));
  EXPECT_FALSE(Fetch(sleds_[0]->VmNamespace(kVmA), "2001:db8:e::10", 8080));
}

TEST_F(DataplaneTest, AnIpv6AddressCarriesTcpUdpAndPingBothWaysUntilDetached) {
  const std::string address = "2001:db8:f100::10";
  EXPECT_FALSE(Fetch(lab_.ns("ext"), address, 80)) << "nothing attached yet";
  Attach(address, 0, kVmA);
  auto tcp = Fetch(lab_.ns("ext"), address, 80);
  ASSERT_TRUE(tcp) << tcp.error().message();
  EXPECT_EQ(tcp->substr(0, tcp->rfind(':')), "host=vm-a client=[2001:db8:e::10]");
  auto udp = Fetch(lab_.ns("ext"), address, 80, /*udp=*/true);
  ASSERT_TRUE(udp) << udp.error().message();
  EXPECT_EQ(udp->substr(0, udp->rfind(':')), "host=vm-a client=[2001:db8:e::10]");
  EXPECT_TRUE(InNs(lab_.ns("ext"), {"ping", "-c", "1", "-W", "2", address}));
  // The instance's own connections leave as its IPv6 address.
  auto internet = Responder::Start(lab_.ns("ext"), "internet", 8080).value();
  auto out = Fetch(sleds_[0]->VmNamespace(kVmA), "2001:db8:e::10", 8080);
  ASSERT_TRUE(out) << out.error().message();
  EXPECT_EQ(out->substr(0, out->rfind(':')), "host=internet client=[2001:db8:f100::10]");

  Detach(address, 0, kVmA);
  EXPECT_FALSE(Fetch(lab_.ns("ext"), address, 80));
  EXPECT_FALSE(Fetch(lab_.ns("ext"), address, 80, /*udp=*/true));
  EXPECT_FALSE(Fetch(sleds_[0]->VmNamespace(kVmA), "2001:db8:e::10", 8080));
  EXPECT_EQ(sleds_[0]->Answered(kVmA), 2) << "nothing more reached the instance";
}

TEST_F(DataplaneTest, APortWithoutAPrivateAddressOfTheVersionIsRefusedTheExternalAddress) {
  ASSERT_TRUE(sleds_[0]->AddPort(kVmC, "vm-c", {Ip("172.30.0.12"), std::nullopt}));
  Status refused = sleds_[0]->SetExternalIps(kVmC, {Ip("2001:db8:f100::10")}, std::nullopt);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message(),
            "external address 2001:db8:f100::10: instance cccccccc-0000-4000-8000-000000000003 "
            "has no private IPv6 address to carry it to");
}

// Instances of different VPCs may hold the same private address on one sled: each port's
// packets and tracked flows are its own (a mark, a conntrack zone and a routing table per port).
TEST_F(DataplaneTest, TwoPortsWithTheSamePrivateAddressEachGetTheirOwnTraffic) {
  ASSERT_TRUE(sleds_[0]->AddPort(kVmC, "vm-c", {Ip("172.30.0.10"), std::nullopt}));
  Attach("203.0.113.10", 0, kVmA);
  Attach("203.0.113.11", 0, kVmC);
  // From one client port to both: after DNAT the two flows look the same from the instances'
  // side (172.30.0.10:80 to 192.0.2.10:40000), which one conntrack table cannot hold twice (it
  // would rewrite the second one's client port). Each instance sees the client as it is.
  for (bool udp : {false, true}) {
    auto a = Fetch(lab_.ns("ext"), "203.0.113.10", 80, udp, 40000);
    ASSERT_TRUE(a) << a.error().message();
    EXPECT_EQ(*a, "host=vm-a client=192.0.2.10:40000");
    auto c = Fetch(lab_.ns("ext"), "203.0.113.11", 80, udp, 40000);
    ASSERT_TRUE(c) << c.error().message();
    EXPECT_EQ(*c, "host=vm-c client=192.0.2.10:40000");
  }
  // Outbound through one SNAT address, a block each: each port's flows come back to it.
  auto internet = Responder::Start(lab_.ns("ext"), "internet", 8080).value();
  ASSERT_TRUE(switch_->Apply(
      {}, {Entry("198.51.100.7", 0, 0, 16383), Entry("198.51.100.7", 0, 16384, 32767)}));
  Detach("203.0.113.10", 0, kVmA);
  Detach("203.0.113.11", 0, kVmC);
  ASSERT_TRUE(sleds_[0]->SetExternalIps(kVmA, {}, SnatBlock{Ip("198.51.100.7"), 0, 16383}));
  ASSERT_TRUE(sleds_[0]->SetExternalIps(kVmC, {}, SnatBlock{Ip("198.51.100.7"), 16384, 32767}));
  for (const auto& [vm, first, last] : {std::tuple{kVmA, 0, 16383}, {kVmC, 16384, 32767}}) {
    auto out = Fetch(sleds_[0]->VmNamespace(vm), "192.0.2.20", 8080);
    ASSERT_TRUE(out) << out.error().message();
    ASSERT_EQ(out->substr(0, out->rfind(':')), "host=internet client=198.51.100.7");
    int port = std::stoi(out->substr(out->rfind(':') + 1));
    EXPECT_GE(port, first);
    EXPECT_LE(port, last);
  }
}

}  // namespace
}  // namespace fp::agents::dataplane
