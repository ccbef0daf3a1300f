#include <gtest/gtest.h>

#include "agents/agents.h"
#include "common/testing/ip.h"

namespace fp::agents {
namespace {

using Json = nlohmann::json;

using fp::testing::Ip;

NatEntry Entry() {
  return NatEntry{.external_ip = Ip("203.0.113.5"),
                  .first_port = 16384,
                  .last_port = 32767,
                  .sled_address = Ip("fd00:1122:3344:101::1"),
                  .vni = 4096,
                  .mac = "a8:40:25:00:00:01"};
}

TEST(NatEntryJson, UsesTheWireFieldNamesAndRoundTrips) {
  Json j = Entry().ToJson();
  EXPECT_EQ(j, Json::parse(R"({"external_ip": "203.0.113.5", "first_port": 16384,
      "last_port": 32767, "sled_address": "fd00:1122:3344:101::1", "vni": 4096,
      "mac": "a8:40:25:00:00:01"})"));
  EXPECT_EQ(NatEntry::FromJson(j).value(), Entry());
}

TEST(NatEntryJson, RejectsBadFieldsNamingThem) {
  auto with = [](std::string_view field, Json value) {
    Json j = Entry().ToJson();
    j[std::string(field)] = std::move(value);
    return NatEntry::FromJson(j);
  };
  EXPECT_NE(with("first_port", 70000).error().message().find("field \"first_port\""),
            std::string::npos);
  EXPECT_NE(with("last_port", 1).error().message().find("must not be below first_port"),
            std::string::npos);
  EXPECT_NE(with("mac", "a8:40:25").error().message().find("invalid MAC address"),
            std::string::npos);
  EXPECT_NE(with("vni", int64_t{1} << 24).error().message().find("field \"vni\""),
            std::string::npos);
  EXPECT_NE(with("external_ip", "300.1.1.1").error().message().find("field \"external_ip\""),
            std::string::npos);
  EXPECT_EQ(with("vni", "5").error().kind(), ErrorKind::kInvalidRequest);
  EXPECT_FALSE(NatEntry::FromJson(Json::array()));
}

TEST(NatTableJson, NamesTheEntryByItsIndex) {
  NatTable table{.generation = 9, .entries = {Entry(), Entry()}};
  Json j = table.ToJson();
  EXPECT_EQ(NatTable::FromJson(j).value(), table);
  j["entries"][1]["first_port"] = -1;
  EXPECT_NE(NatTable::FromJson(j).error().message().find("field \"entries[1].first_port\""),
            std::string::npos);
}

TEST(NatChangeJson, RoundTripsAndRequiresAPositiveGeneration) {
  NatChange change{.entry = Entry(), .gen = 12, .deleted = true};
  Json j = change.ToJson();
  EXPECT_EQ(j["gen"], 12);
  EXPECT_EQ(j["deleted"], true);
  EXPECT_EQ(NatChange::FromJson(j).value(), change);
  j["gen"] = 0;
  EXPECT_FALSE(NatChange::FromJson(j));
  j["gen"] = 1;
  j["entry"]["mac"] = 5;
  EXPECT_NE(NatChange::FromJson(j).error().message().find("field \"entry.mac\""),
            std::string::npos);
}

TEST(VmStateNames, RoundTripEveryState) {
  for (VmState s : {VmState::kStarting, VmState::kRunning, VmState::kStopping, VmState::kStopped,
                    VmState::kMigrating, VmState::kFailed}) {
    EXPECT_EQ(ParseVmState(ToString(s)), s);
  }
  EXPECT_EQ(ToString(VmState::kMigrating), "migrating");
  EXPECT_EQ(ParseVmState("Running"), std::nullopt);
  EXPECT_EQ(ParseVmState("destroyed"), std::nullopt);
}

TEST(InstanceSpecJson, RoundTripsWithAndWithoutOptionalAddresses) {
  InstanceSpec spec{.id = Uuid::Random(),
                    .ncpus = 2,
                    .memory = 1 << 30,
                    .vni = 77,
                    .mac = "a8:40:25:f0:00:02",
                    .private_ipv4 = Ip("172.30.0.5"),
                    .private_ipv6 = std::nullopt,
                    .external_ips = {Ip("198.51.100.1"), Ip("2001:db8::7")},
                    .snat_ip = Ip("198.51.100.9"),
                    .snat_first_port = 16384,
                    .snat_last_port = 32767};
  Json j = spec.ToJson();
  EXPECT_TRUE(j["private_ipv6"].is_null());
  EXPECT_EQ(InstanceSpec::FromJson(j).value(), spec);

  InstanceSpec minimal{.id = spec.id};
  EXPECT_EQ(InstanceSpec::FromJson(Json{{"id", spec.id.ToString()}}).value(), minimal);
  EXPECT_NE(InstanceSpec::FromJson(Json{{"id", "nope"}}).error().message().find("invalid UUID"),
            std::string::npos);
  Json bad_ip = j;
  bad_ip["external_ips"][1] = "2001:db8::zz";
  EXPECT_NE(InstanceSpec::FromJson(bad_ip).error().message().find("field \"external_ips[1]\""),
            std::string::npos);
}

TEST(SledInstanceJson, CarriesIdStateAndAddressStrings) {
  SledInstance instance{.id = Uuid::Random(),
                        .state = VmState::kStopping,
                        .external_ips = {Ip("198.51.100.1"), Ip("198.51.100.9")},
                        .snat_ip = Ip("198.51.100.9"),
                        .boots = 3};
  Json j = instance.ToJson();
  EXPECT_EQ(j["state"], "stopping");
  EXPECT_EQ(j["boots"], 3);
  EXPECT_EQ(j["external_ips"], Json::parse(R"(["198.51.100.1", "198.51.100.9"])"));
  EXPECT_EQ(SledInstance::FromJson(j).value(), instance);
  j["state"] = "sleeping";
  EXPECT_NE(SledInstance::FromJson(j).error().message().find("unknown state \"sleeping\""),
            std::string::npos);
}

}  // namespace
}  // namespace fp::agents
