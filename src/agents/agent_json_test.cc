#include <fmt/format.h>
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

// The text form decodes as the tree form does, entry by entry, with the same errors.
TEST(NatTableJson, ParsingTheTextGivesWhatTheTreeGives) {
  NatTable table{.generation = 9, .entries = {Entry(), Entry(), Entry()}};
  table.entries[1].first_port = 16384;
  table.entries[1].last_port = 32767;
  Json j = table.ToJson();
  j["unknown"] = Json{{"entries", Json::array({1, 2})}};  // an unknown field is ignored
  EXPECT_EQ(NatTable::Parse(j.dump()).value(), table);
  EXPECT_EQ(NatTable::Parse(NatTable{.generation = 3}.ToJson().dump()).value(),
            NatTable{.generation = 3});
  j["entries"][1]["first_port"] = -1;
  auto bad = NatTable::Parse(j.dump());
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message(), NatTable::FromJson(j).error().message());
  EXPECT_NE(bad.error().message().find("field \"entries[1].first_port\""), std::string::npos);
  // "entries" twice: the last stands, as in the tree.
  const std::string twice = fmt::format(R"({{"generation": 9, "entries": [5], "entries": {}}})",
                                        table.ToJson()["entries"].dump());
  EXPECT_EQ(NatTable::Parse(twice).value(), NatTable::FromJson(Json::parse(twice)).value());
  EXPECT_FALSE(NatTable::Parse(R"({"generation": 1, "entries": [5]})"));
  EXPECT_FALSE(NatTable::Parse(R"({"generation": 1, "entries": {}})"));
  EXPECT_FALSE(NatTable::Parse(R"({"entries": []})"));
  EXPECT_FALSE(NatTable::Parse(R"({"generation": 1, "entries": [)"));
  EXPECT_FALSE(NatTable::Parse(""));
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

// Each body and answer of the switch agent's NAT endpoints has one codec, which the client and
// the agent both use: these are its wire shapes.
TEST(NatWireJson, RequestsAndAnswersUseTheWireShapesAndRoundTrip) {
  NatChange add{.entry = Entry(), .gen = 7, .deleted = false};
  NatChangesRequest on_run{{add}, "boot-1"};
  EXPECT_EQ(on_run.ToJson(), (Json{{"changes", {add.ToJson()}}, {"boot_id", "boot-1"}}));
  EXPECT_EQ(NatChangesRequest::FromJson(on_run.ToJson()).value(), on_run);
  NatChangesRequest any_run{{add}, std::nullopt};
  EXPECT_FALSE(any_run.ToJson().contains("boot_id"));
  EXPECT_EQ(NatChangesRequest::FromJson(any_run.ToJson()).value(), any_run);

  NatApplied stopped{.generation = 6, .boot_id = "boot-1", .failed_gen = 7, .message = "full"};
  EXPECT_EQ(stopped.ToJson(), Json::parse(R"({"generation": 6, "boot_id": "boot-1",
      "failed_gen": 7, "message": "full"})"));
  EXPECT_EQ(NatApplied::FromJson(stopped.ToJson()).value(), stopped);
  NatApplied mismatch{.generation = 3, .boot_id = "boot-2", .boot_mismatch = true};
  EXPECT_EQ(mismatch.ToJson(), Json::parse(R"({"generation": 3, "boot_id": "boot-2",
      "boot_mismatch": true})"));
  EXPECT_EQ(NatApplied::FromJson(mismatch.ToJson()).value(), mismatch);

  NatReplaceRequest conditional{NatTable{.generation = 9, .entries = {Entry()}}, 8};
  Json body = conditional.ToJson();
  EXPECT_EQ(body["if_generation"], 8);
  EXPECT_EQ(NatTable::FromJson(body).value(), conditional.table);  // a table with one more field
  EXPECT_EQ(NatReplaceRequest::FromJson(body).value(), conditional);
  NatReplaceRequest unconditional{conditional.table, std::nullopt};
  EXPECT_FALSE(unconditional.ToJson().contains("if_generation"));

  // PUT /nat's body is written as text directly (a whole table is large): byte for byte what
  // the table's JSON with its condition dumps to, with a MAC that needs escaping, an IPv4 and
  // an IPv6 entry, and no entries at all.
  NatEntry odd = Entry();
  odd.external_ip = Ip("2001:db8::7");
  odd.sled_address = Ip("10.1.2.3");
  odd.mac = "a\"b\u00e9\n";
  for (const NatTable& table : {NatTable{.generation = 9, .entries = {Entry(), odd}},
                                NatTable{.generation = 0, .entries = {}}}) {
    Json expected = table.ToJson();
    EXPECT_EQ(NatReplaceRequest::Encode(table, std::nullopt), expected.dump());
    expected["if_generation"] = 8;
    EXPECT_EQ(NatReplaceRequest::Encode(table, 8), expected.dump());
  }

  // POST /nat/changes' body too (one a saga's every push writes): the same bytes as the
  // request's JSON dumps to, additions and removals, on a run or any, with a boot id that needs
  // escaping, and no changes at all.
  const std::vector<NatChange> changes{{.entry = Entry(), .gen = 12, .deleted = false},
                                       {.entry = odd, .gen = 13, .deleted = true}};
  for (const std::optional<std::string>& boot :
       {std::optional<std::string>("boot-\"1\"\t"), std::optional<std::string>(std::nullopt)}) {
    for (const std::vector<NatChange>& some : {changes, std::vector<NatChange>{}}) {
      EXPECT_EQ(NatChangesRequest::Encode(some, boot),
                (NatChangesRequest{.changes = some, .boot_id = boot}.ToJson().dump()));
    }
  }

  NatReplaced refused{.generation = 9, .replaced = false, .boot_id = "boot-1"};
  EXPECT_EQ(refused.ToJson(), Json::parse(R"({"generation": 9, "replaced": false,
      "boot_id": "boot-1"})"));
  EXPECT_EQ(NatReplaced::FromJson(refused.ToJson()).value(), refused);

  AgentError error{"req-1", "ServiceNotAvailable", "busy"};
  EXPECT_EQ(error.ToJson(), Json::parse(R"({"request_id": "req-1",
      "error_code": "ServiceNotAvailable", "message": "busy"})"));
  EXPECT_EQ(AgentError::FromJson(error.ToJson()).value(), error);
}

TEST(NatWireJson, BadRequestsNameTheField) {
  EXPECT_NE(NatChangesRequest::FromJson(Json{{"changes", 1}})
                .error()
                .message()
                .find("field \"changes\": expected an array"),
            std::string::npos);
  EXPECT_NE(NatChangesRequest::FromJson(Json{{"changes", {Json{{"gen", 1}}}}})
                .error()
                .message()
                .find("changes[0]"),
            std::string::npos);
  EXPECT_NE(NatChangesRequest::FromJson(Json{{"changes", Json::array()}, {"boot_id", 5}})
                .error()
                .message()
                .find("field \"boot_id\": expected a string"),
            std::string::npos);
  Json table = NatTable{}.ToJson();
  table["if_generation"] = "latest";
  EXPECT_NE(NatReplaceRequest::FromJson(table).error().message().find(
                "field \"if_generation\": expected an integer"),
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
