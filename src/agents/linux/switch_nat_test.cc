// The switch's NAT table in nftables (agents/linux/switch_nat.h), in network namespaces the test
// makes itself. Needs root: skipped without it (CI runs as root, so there it runs).

#include "agents/linux/switch_nat.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "agents/daemon/switch_agent.h"
#include "agents/linux/tunnel.h"
#include "agents/testing/lab.h"
#include "common/testing/ip.h"

namespace fp::agents::dataplane {
namespace {

using fp::testing::Ip;

NatEntry Entry(const std::string& ip, int first, int last, const std::string& sled,
               int64_t vni = 10) {
  return NatEntry{Ip(ip), first, last, Ip(sled), vni, "a8:40:25:00:00:01"};
}

// A network namespace of the test's own, deleted at the end.
class TestNamespace {
 public:
  explicit TestNamespace(const std::string& tag) : name_("fpnat" + tag + std::to_string(getpid())) {
    ok_ = static_cast<bool>(RunCommand({"ip", "netns", "add", name_}));
  }
  ~TestNamespace() {
    if (ok_) (void)RunCommand({"ip", "netns", "del", name_});
  }
  bool ok() const { return ok_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  bool ok_ = false;
};

class SwitchNatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces, nftables)";
    ASSERT_TRUE(ns_.ok()) << "cannot create a network namespace";
    auto nat = SwitchNat::Open(ns_.name());
    ASSERT_TRUE(nat) << nat.error().message();
    nat_ = std::move(*nat);
  }
  std::vector<std::string> Dump() {
    auto d = nat_->Dump();
    EXPECT_TRUE(d) << d.error().message();
    return d ? *d : std::vector<std::string>{};
  }

  TestNamespace ns_{"a"};
  std::unique_ptr<SwitchNat> nat_;
};

TEST_F(SwitchNatTest, EntriesGoIntoTheMapsOfTheirKindWithAMarkPerTarget) {
  ASSERT_TRUE(nat_->Apply({}, {Entry("203.0.113.10", 0, 65535, "2001:db8:10::1"),
                               Entry("198.51.100.7", 16384, 32767, "2001:db8:11::1"),
                               Entry("198.51.100.7", 49152, 65535, "2001:db8:10::1"),
                               Entry("2001:db8:f100::5", 0, 65535, "2001:db8:10::1", 11),
                               Entry("2001:db8:f100::6", 32768, 49151, "2001:db8:10::1")}));
  EXPECT_EQ(Dump(), (std::vector<std::string>{
                        "blk4 198.51.100.7 . 1 -> 0x101", "blk4 198.51.100.7 . 3 -> 0x100",
                        "blk6 2001:db8:f100::6 . 2 -> 0x100", "ext4 203.0.113.10 -> 0x100",
                        "ext6 2001:db8:f100::5 -> 0x102"}));
  EXPECT_EQ(nat_->MarkOf(Ip("2001:db8:11::1"), 10), 0x101u);
  EXPECT_EQ(nat_->MarkOf(Ip("2001:db8:10::1"), 11), 0x102u) << "a mark per (sled, VNI)";
  EXPECT_EQ(nat_->MarkOf(Ip("2001:db8:12::1"), 10), std::nullopt);
}

TEST_F(SwitchNatTest, ARetargetAndARemovalAreOneTransaction) {
  ASSERT_TRUE(nat_->Apply({}, {Entry("203.0.113.10", 0, 65535, "2001:db8:10::1"),
                               Entry("203.0.113.11", 0, 65535, "2001:db8:10::1")}));
  // The move to the other sled replaces the element in the same batch as the removal.
  ASSERT_TRUE(nat_->Apply({Entry("203.0.113.11", 0, 65535, "2001:db8:10::1")},
                          {Entry("203.0.113.10", 0, 65535, "2001:db8:11::1")}));
  EXPECT_EQ(Dump(), (std::vector<std::string>{"ext4 203.0.113.10 -> 0x101"}));
  // Applying the same again changes nothing (and sends nothing).
  ASSERT_TRUE(nat_->Apply({}, {Entry("203.0.113.10", 0, 65535, "2001:db8:11::1")}));
  EXPECT_EQ(Dump(), (std::vector<std::string>{"ext4 203.0.113.10 -> 0x101"}));
}

TEST_F(SwitchNatTest, ReplaceAllLeavesExactlyTheGivenEntries) {
  ASSERT_TRUE(nat_->Apply({}, {Entry("203.0.113.10", 0, 65535, "2001:db8:10::1"),
                               Entry("203.0.113.11", 0, 65535, "2001:db8:10::1")}));
  ASSERT_TRUE(nat_->ReplaceAll({Entry("203.0.113.11", 0, 65535, "2001:db8:11::1"),
                                Entry("203.0.113.12", 0, 65535, "2001:db8:10::1")}));
  EXPECT_EQ(Dump(),
            (std::vector<std::string>{"ext4 203.0.113.11 -> 0x101", "ext4 203.0.113.12 -> 0x100"}));
}

TEST_F(SwitchNatTest, RangesTheSwitchCannotHoldAreRefusedAndChangeNothing) {
  ASSERT_TRUE(nat_->Apply({}, {Entry("203.0.113.10", 0, 65535, "2001:db8:10::1")}));
  for (const NatEntry& bad : {Entry("198.51.100.7", 100, 200, "2001:db8:10::1"),
                              Entry("198.51.100.7", 16384, 32768, "2001:db8:10::1"),
                              Entry("2001:db8:f100::5", 16384, 16399, "2001:db8:10::1")}) {
    Status s = nat_->Apply({Entry("203.0.113.10", 0, 65535, "2001:db8:10::1")}, {bad});
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error().kind(), ErrorKind::kInvalidRequest) << s.error().message();
  }
  EXPECT_EQ(Dump(), (std::vector<std::string>{"ext4 203.0.113.10 -> 0x100"}));
}

TEST_F(SwitchNatTest, ARestartedAgentStartsEmptyAndNamespacesAreApart) {
  ASSERT_TRUE(nat_->Apply({}, {Entry("203.0.113.10", 0, 65535, "2001:db8:10::1")}));
  TestNamespace other("b");
  ASSERT_TRUE(other.ok());
  auto elsewhere = SwitchNat::Open(other.name());
  ASSERT_TRUE(elsewhere) << elsewhere.error().message();
  EXPECT_EQ((*elsewhere)->Dump().value(), std::vector<std::string>{}) << "another namespace";
  EXPECT_EQ(Dump().size(), 1u) << "untouched by the other namespace's table";

  nat_.reset();
  auto restarted = SwitchNat::Open(ns_.name());
  ASSERT_TRUE(restarted) << restarted.error().message();
  EXPECT_EQ((*restarted)->Dump().value(), std::vector<std::string>{});
}

// The switch agent over HTTP with the nftables dataplane: the table the server reads back
// (GET /nat) and the kernel's maps say the same after every request, including one the
// dataplane refuses.
TEST_F(SwitchNatTest, TheAgentsTableAndTheKernelsMapsAgree) {
  auto* nat = nat_.get();
  auto agent = daemon::SwitchAgentDaemon::Start(daemon::DaemonOptions{}, std::move(nat_)).value();
  auto client = MakeSwitchAgentClient(agent->base_url(), 2000);
  auto kernel = [&] { return nat->Dump().value(); };
  // Which target got which mark is the dataplane's business; that each keeps its own is not.
  auto mark = [&](const std::string& sled) {
    auto m = nat->MarkOf(Ip(sled), 10);
    return m ? fmt::format("{:#x}", *m) : std::string("none");
  };
  NatEntry a = Entry("203.0.113.10", 0, 65535, "2001:db8:10::1");
  NatEntry b = Entry("198.51.100.7", 16384, 32767, "2001:db8:11::1");
  ASSERT_EQ(client->ApplyChanges({NatChange{a, 1, false}, NatChange{b, 2, false}}).value(), 2);
  EXPECT_EQ(kernel(),
            (std::vector<std::string>{"blk4 198.51.100.7 . 1 -> " + mark("2001:db8:11::1"),
                                      "ext4 203.0.113.10 -> " + mark("2001:db8:10::1")}));
  EXPECT_NE(mark("2001:db8:11::1"), mark("2001:db8:10::1"));
  // A change the switch cannot hold stops the request there, as a full table does: the
  // changes before it stay, in memory and in the kernel alike.
  NatEntry odd = Entry("198.51.100.8", 100, 200, "2001:db8:10::1");
  ASSERT_EQ(client->ApplyChanges({NatChange{a, 3, true}, NatChange{odd, 4, false}}).value(), 3);
  EXPECT_EQ(client->GetNat().value().entries, std::vector<NatEntry>{b});
  EXPECT_EQ(kernel(),
            (std::vector<std::string>{"blk4 198.51.100.7 . 1 -> " + mark("2001:db8:11::1")}));

  NatTable table{7, {a}};
  ASSERT_EQ(client->ReplaceAll(table).value(), 7);
  EXPECT_EQ(kernel(), (std::vector<std::string>{"ext4 203.0.113.10 -> " + mark("2001:db8:10::1")}));
  EXPECT_FALSE(client->ReplaceAll(NatTable{8, {odd}})) << "a table the switch cannot hold";
  EXPECT_EQ(client->GetNat().value().generation, 7);
  EXPECT_EQ(kernel(), (std::vector<std::string>{"ext4 203.0.113.10 -> " + mark("2001:db8:10::1")}));
}

// An address's full-range entry replaced by a port block of it in one request (a freed address
// reused for SNAT): the same key in the agent's table (address, first port 0), different maps
// in the kernel. The old entry must go, or the full-range map keeps sending it to the old sled.
TEST_F(SwitchNatTest, AnEntryReplacedByOneOfAnotherKindLeavesNothingBehind) {
  auto* nat = nat_.get();
  auto agent = daemon::SwitchAgentDaemon::Start(daemon::DaemonOptions{}, std::move(nat_)).value();
  auto client = MakeSwitchAgentClient(agent->base_url(), 2000);
  NatEntry whole = Entry("203.0.113.10", 0, 65535, "2001:db8:10::1");
  NatEntry block = Entry("203.0.113.10", 0, 16383, "2001:db8:11::1");
  ASSERT_EQ(client->ApplyChanges({NatChange{whole, 1, false}}).value(), 1);
  ASSERT_EQ(client->ApplyChanges({NatChange{whole, 2, true}, NatChange{block, 3, false}}).value(),
            3);
  auto mark = nat->MarkOf(Ip("2001:db8:11::1"), 10);
  ASSERT_TRUE(mark);
  EXPECT_EQ(nat->Dump().value(),
            (std::vector<std::string>{fmt::format("blk4 203.0.113.10 . 0 -> {:#x}", *mark)}));
  ASSERT_EQ(client->ApplyChanges({NatChange{block, 4, true}, NatChange{whole, 5, false}}).value(),
            5);
  EXPECT_EQ(nat->Dump().value(),
            (std::vector<std::string>{fmt::format("ext4 203.0.113.10 -> {:#x}",
                                                  *nat->MarkOf(Ip("2001:db8:10::1"), 10))}));
}

// Maps changed behind the agent's back (an element deleted by hand) would make every later
// difference refused; the agent refills them whole instead.
TEST_F(SwitchNatTest, MapsChangedBehindTheAgentsBackAreRefilledNotStuck) {
  ASSERT_TRUE(nat_->Apply({}, {Entry("203.0.113.10", 0, 65535, "2001:db8:10::1"),
                               Entry("203.0.113.11", 0, 65535, "2001:db8:10::1")}));
  ASSERT_TRUE(RunCommand({"ip", "netns", "exec", ns_.name(), "nft", "delete", "element", "inet",
                          "fp_switch", "ext4", "{ 203.0.113.10 }"}));
  // Deleting what the kernel no longer has fails as a difference; whole, it succeeds.
  ASSERT_TRUE(nat_->Apply({Entry("203.0.113.10", 0, 65535, "2001:db8:10::1")},
                          {Entry("203.0.113.12", 0, 65535, "2001:db8:10::1")}));
  EXPECT_EQ(Dump(),
            (std::vector<std::string>{"ext4 203.0.113.11 -> 0x100", "ext4 203.0.113.12 -> 0x100"}));
  ASSERT_TRUE(RunCommand(
      {"ip", "netns", "exec", ns_.name(), "nft", "flush", "map", "inet", "fp_switch", "ext4"}));
  ASSERT_TRUE(nat_->ReplaceAll({Entry("203.0.113.11", 0, 65535, "2001:db8:10::1"),
                                Entry("203.0.113.12", 0, 65535, "2001:db8:10::1")}));
  EXPECT_EQ(Dump(),
            (std::vector<std::string>{"ext4 203.0.113.11 -> 0x100", "ext4 203.0.113.12 -> 0x100"}));
}

TEST(SwitchNatOpen, AMissingNamespaceIsNotFound) {
  auto nat = SwitchNat::Open("fp-no-such-namespace");
  ASSERT_FALSE(nat);
  EXPECT_EQ(nat.error().kind(), ErrorKind::kNotFound);
  EXPECT_NE(nat.error().message().find("is the lab up?"), std::string::npos);
}

}  // namespace
}  // namespace fp::agents::dataplane

namespace fp::agents::dataplane {
namespace {

using fp::agents::testing::InNs;
using fp::agents::testing::Lab;

// Packets from the external network to an address the switch maps to a sled reach that sled,
// encapsulated with the sled's tunnel MAC and answered back through the switch; a retarget
// moves them to the other sled; a removal ends them (the switch answers unreachable).
TEST(SwitchTunnels, PacketsToAMappedAddressReachItsSledAndFollowARetarget) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces, nftables)";
  Lab lab("fpsn");
  ASSERT_TRUE(lab.ok()) << lab.error();
  const IpAddr switch_underlay = Ip("2001:db8:ff::1");
  auto nat = SwitchNat::Open(lab.ns("sw"), switch_underlay);
  ASSERT_TRUE(nat) << nat.error().message();
  // The sleds' ends, as the sled agent makes them: vx0 with the MAC the switch derives, a
  // route back to the switch through it, and the address answered locally.
  const std::vector<std::string> sleds = {"2001:db8:10::1", "2001:db8:11::1"};
  for (size_t i = 0; i < sleds.size(); ++i) {
    std::string ns = lab.ns("sled" + std::to_string(i));
    ASSERT_TRUE(InNs(ns, {"ip", "link", "add", "vx0", "address", SledTunnelMac(Ip(sleds[i])),
                          "type", "vxlan", "external", "dstport", "4789"}));
    ASSERT_TRUE(InNs(ns, {"ip", "link", "set", "vx0", "up"}));
    ASSERT_TRUE(InNs(ns, {"ip", "neigh", "replace", std::string(kSwitchNextHop4), "lladdr",
                          std::string(kSwitchTunnelMac), "dev", "vx0", "nud", "permanent"}));
    ASSERT_TRUE(InNs(ns, {"ip", "route", "add", "default", "via", std::string(kSwitchNextHop4),
                          "dev", "vx0", "onlink", "encap", "ip6", "id", "10", "src", sleds[i],
                          "dst", "2001:db8:ff::1", "csum"}));
    ASSERT_TRUE(InNs(ns, {"ip", "addr", "add", "203.0.113.10/32", "dev", "lo"}));
  }
  auto received = [&](size_t i) -> int64_t {
    auto out = RunCommandOutput(
        {"ip", "-n", lab.ns("sled" + std::to_string(i)), "-s", "-j", "link", "show", "vx0"});
    if (!out) return -1;
    auto j = nlohmann::json::parse(*out, nullptr, false);
    if (!j.is_array() || j.empty()) return -1;
    return j[0]["stats64"]["rx"]["packets"].get<int64_t>();
  };
  auto ping = [&]() {
    return InNs(lab.ns("ext"), {"ping", "-c", "3", "-i", "0.2", "-W", "2", "203.0.113.10"});
  };

  EXPECT_FALSE(ping()) << "nothing maps the address yet";
  EXPECT_EQ(received(0), 0);
  EXPECT_EQ(received(1), 0);

  NatEntry to_sled1 = Entry("203.0.113.10", 0, 65535, sleds[1]);
  ASSERT_TRUE((*nat)->Apply({}, {to_sled1}));
  Status answered = ping();
  EXPECT_TRUE(answered) << answered.error().message();
  EXPECT_GE(received(1), 3);
  EXPECT_EQ(received(0), 0);

  int64_t at_sled1 = received(1);
  ASSERT_TRUE((*nat)->Apply({}, {Entry("203.0.113.10", 0, 65535, sleds[0])}));
  answered = ping();
  EXPECT_TRUE(answered) << answered.error().message();
  EXPECT_GE(received(0), 3);
  EXPECT_EQ(received(1), at_sled1) << "after the retarget nothing more reaches sled 1";

  ASSERT_TRUE((*nat)->Apply({Entry("203.0.113.10", 0, 65535, sleds[0])}, {}));
  int64_t at_sled0 = received(0);
  EXPECT_FALSE(ping()) << "removed: the switch answers unreachable";
  EXPECT_EQ(received(0), at_sled0);
}

}  // namespace
}  // namespace fp::agents::dataplane
