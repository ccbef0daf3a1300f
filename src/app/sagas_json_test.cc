// The saga logs that the string-keyed code before the typed saga parameters wrote: each is
// hand-written here exactly as that code wrote it (app/instance_sagas.cc, app/external_ips.cc,
// app/instances.cc of that time), and must still decode into today's structs, keeping every
// key. A saga persisted by the older binary is resumed by this one after an upgrade
// (instance_sagas_test.cc resumes such logs end to end).

#include <gtest/gtest.h>

#include "app/sagas/instance_create.h"
#include "app/sagas/instance_delete.h"
#include "app/sagas/instance_migrate.h"
#include "app/sagas/instance_start.h"
#include "app/sagas/ip_attach.h"
#include "app/sagas/ip_detach.h"
#include "app/sagas/ip_steps.h"

namespace fp::app {
namespace {

using saga::Json;

constexpr char kA[] = "0c5c3a7e-7d3e-4b1e-9a56-0d1f6c1c0a01";
constexpr char kB[] = "0c5c3a7e-7d3e-4b1e-9a56-0d1f6c1c0a02";
constexpr char kC[] = "0c5c3a7e-7d3e-4b1e-9a56-0d1f6c1c0a03";
constexpr char kD[] = "0c5c3a7e-7d3e-4b1e-9a56-0d1f6c1c0a04";
constexpr char kE[] = "0c5c3a7e-7d3e-4b1e-9a56-0d1f6c1c0a05";
constexpr char kF[] = "0c5c3a7e-7d3e-4b1e-9a56-0d1f6c1c0a06";
constexpr char kG[] = "0c5c3a7e-7d3e-4b1e-9a56-0d1f6c1c0a07";

Uuid U(const char* text) { return *Uuid::Parse(text); }

// Every key of `old`, at any depth, is in `now` with the same value: the struct that decoded
// `old` writes it back under the same names (it may add keys the old writer left out).
void ExpectKeepsEveryKey(const Json& old, const Json& now, const std::string& path = "") {
  if (old.is_object()) {
    ASSERT_TRUE(now.is_object()) << path << ": " << now.dump();
    for (const auto& [key, value] : old.items()) {
      ASSERT_TRUE(now.contains(key)) << path << "." << key << " is gone: " << now.dump();
      ExpectKeepsEveryKey(value, now[key], path + "." + key);
    }
  } else if (old.is_array()) {
    ASSERT_TRUE(now.is_array() && now.size() == old.size()) << path << ": " << now.dump();
    for (size_t k = 0; k < old.size(); ++k) {
      ExpectKeepsEveryKey(old[k], now[k], path + "[" + std::to_string(k) + "]");
    }
  } else {
    EXPECT_EQ(old, now) << path;
  }
}

template <class T>
T DecodesKeepingEveryKey(const std::string& old_text) {
  Json old = Json::parse(old_text);
  auto decoded = Decode<T>(old, "test");
  EXPECT_TRUE(decoded) << decoded.error().message();
  if (!decoded) return T{};
  ExpectKeepsEveryKey(old, Json(*decoded));
  return *decoded;
}

Json OldInstanceRecord() {
  return Json{{"id", kA},
              {"project_id", kB},
              {"name", "old-vm"},
              {"description", "made before the upgrade"},
              {"hostname", "old-vm"},
              {"ncpus", 2},
              {"memory", int64_t{1} << 30},
              {"state", "no_vmm"},
              {"run_state", "stopped"},
              {"sled_id", nullptr},
              {"start_saga_id", nullptr},
              {"migration_id", nullptr},
              {"time_run_state_updated", 1700000000000001},
              {"time_created", 1700000000000000},
              {"time_modified", 1700000000000002}};
}

Json OldIpRecord() {
  return Json{{"id", kC},
              {"name", "web"},
              {"description", ""},
              {"pool_id", kD},
              {"range_id", kE},
              {"parent_id", kA},
              {"kind", "floating"},
              {"ip", "10.0.0.3"},
              {"first_port", 0},
              {"last_port", 65535},
              {"project_id", kB},
              {"state", "attached"},
              {"time_created", 1700000000000000},
              {"time_modified", 1700000000000003}};
}

TEST(OldSagaLogs, InstanceCreateParametersDecode) {
  std::string old =
      Json{{"instance_id", kA},
           {"nic_id", kB},
           {"snat_id", kC},
           {"project_id", kD},
           {"silo_id", kE},
           {"name", "old-vm"},
           {"description", ""},
           {"hostname", "old-vm"},
           {"ncpus", 2},
           {"memory", uint64_t{1} << 30},
           {"nic", "ipv4"},
           {"start", false},
           {"external_ips",
            Json::array({Json{{"type", "floating"}, {"ip_id", kF}},
                         Json{{"type", "ephemeral"}, {"ip_id", kG}, {"ip_version", "v6"}},
                         Json{{"type", "ephemeral"}, {"ip_id", kB}, {"pool", "v4-pool"}}})}}
          .dump();
  auto p = DecodesKeepingEveryKey<InstanceCreateSagaParams>(old);
  EXPECT_EQ(p.instance_id, U(kA));
  EXPECT_EQ(p.nic_id, U(kB));
  EXPECT_EQ(p.snat_id, U(kC));
  EXPECT_EQ(p.project_id, U(kD));
  EXPECT_EQ(p.silo_id, U(kE));
  EXPECT_EQ(p.name, "old-vm");
  EXPECT_EQ(p.hostname, "old-vm");
  EXPECT_EQ(p.ncpus, 2);
  EXPECT_EQ(p.memory, int64_t{1} << 30);
  EXPECT_EQ(p.nic, model::NicKind::kIpv4);
  EXPECT_FALSE(p.start);
  ASSERT_EQ(p.external_ips.size(), 3u);
  EXPECT_EQ(p.external_ips[0].type, model::IpKind::kFloating);
  EXPECT_EQ(p.external_ips[0].ip_id, U(kF));
  EXPECT_FALSE(p.external_ips[0].pool);
  EXPECT_EQ(p.external_ips[1].type, model::IpKind::kEphemeral);
  EXPECT_EQ(p.external_ips[1].ip_version, IpVersion::kV6);
  EXPECT_EQ(p.external_ips[2].pool->ToString(), "v4-pool");
  EXPECT_FALSE(p.external_ips[2].ip_version);
}

// The old reader defaulted what a log left out: no NIC kind is dual stack, no start is a start.
TEST(OldSagaLogs, InstanceCreateParametersLeftOutReadAsTheOldDefaults) {
  auto p = Decode<InstanceCreateSagaParams>(
      Json{{"instance_id", kA}, {"nic_id", kB}, {"snat_id", kC}, {"project_id", kD}}, "test");
  ASSERT_TRUE(p) << p.error().message();
  EXPECT_EQ(p->nic, model::NicKind::kDualStack);
  EXPECT_TRUE(p->start);
  EXPECT_TRUE(p->external_ips.empty());
}

TEST(OldSagaLogs, InstanceCreateOutputDecodes) {
  auto created =
      DecodesKeepingEveryKey<InstanceCreated>(Json{{"instance", OldInstanceRecord()}}.dump());
  ASSERT_TRUE(created.instance);
  EXPECT_EQ(created.instance->id, U(kA));
  EXPECT_EQ(created.instance->state, model::InstanceState::kNoVmm);
  EXPECT_EQ(created.instance->time_run_state_updated, 1700000000000001);
  EXPECT_FALSE(created.instance->sled_id);
  // The last outputs of instance_start and instance_migrate carry no row.
  auto none = Decode<InstanceCreated>(Json::object(), "test");
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->instance);
}

TEST(OldSagaLogs, InstanceStartMigrateAndDeleteDecode) {
  EXPECT_EQ(
      DecodesKeepingEveryKey<InstanceStartSagaParams>(Json{{"instance_id", kA}}.dump()).instance_id,
      U(kA));
  EXPECT_EQ(DecodesKeepingEveryKey<InstancePlaced>(Json{{"sled_id", kB}}.dump()).sled_id, U(kB));
  EXPECT_EQ(DecodesKeepingEveryKey<InstanceDeleteSagaParams>(Json{{"instance_id", kA}}.dump())
                .instance_id,
            U(kA));
  auto m = DecodesKeepingEveryKey<InstanceMigrateSagaParams>(Json{
      {"instance_id", kA},
      {"src_sled_id", kB},
      {"dst_sled_id", kC},
      {"migration_id", kD}}.dump());
  EXPECT_EQ(m.instance_id, U(kA));
  EXPECT_EQ(m.src_sled_id, U(kB));
  EXPECT_EQ(m.dst_sled_id, U(kC));
  EXPECT_EQ(m.migration_id, U(kD));
}

TEST(OldSagaLogs, IpAttachParametersDecode) {
  auto floating = DecodesKeepingEveryKey<IpAttachSagaParams>(
      Json{{"kind", "floating"}, {"ip_id", kA}, {"instance_id", kB}, {"silo_id", kC}}.dump());
  EXPECT_EQ(floating.kind, model::IpKind::kFloating);
  EXPECT_EQ(floating.ip_id, U(kA));
  EXPECT_EQ(floating.instance_id, U(kB));
  EXPECT_EQ(floating.silo_id, U(kC));
  EXPECT_FALSE(floating.pool);
  EXPECT_FALSE(floating.ip_version);
  auto by_version = DecodesKeepingEveryKey<IpAttachSagaParams>(Json{
      {"kind", "ephemeral"},
      {"ip_id", kA},
      {"instance_id", kB},
      {"silo_id", kC},
      {"ip_version", "v4"}}.dump());
  EXPECT_EQ(by_version.kind, model::IpKind::kEphemeral);
  EXPECT_EQ(SelectorOf(by_version.pool, by_version.ip_version).ip_version, IpVersion::kV4);
  auto by_pool = DecodesKeepingEveryKey<IpAttachSagaParams>(
      Json{{"kind", "ephemeral"}, {"ip_id", kA}, {"instance_id", kB}, {"silo_id", kC}, {"pool", kD}}
          .dump());
  model::PoolSelector selector = SelectorOf(by_pool.pool, by_pool.ip_version);
  EXPECT_EQ(selector.mode, model::PoolSelector::Mode::kExplicitPool);
  EXPECT_EQ(selector.pool->id(), U(kD));
}

TEST(OldSagaLogs, IpDetachParametersAndOutputsDecode) {
  auto p = DecodesKeepingEveryKey<IpDetachSagaParams>(
      Json{{"kind", "ephemeral"}, {"ip_id", kA}, {"instance_id", kB}}.dump());
  EXPECT_EQ(p.kind, model::IpKind::kEphemeral);
  auto begun = DecodesKeepingEveryKey<IpBegun>(
      Json{{"ip_id", kA}, {"do_saga", true}, {"sled_id", kC}, {"ip", "10.0.0.3"}}.dump());
  EXPECT_TRUE(begun.do_saga);
  EXPECT_EQ(begun.sled_id, U(kC));
  EXPECT_EQ(begun.ip, *IpAddr::Parse("10.0.0.3"));
  auto stopped = DecodesKeepingEveryKey<IpBegun>(
      Json{{"ip_id", kA}, {"do_saga", false}, {"sled_id", nullptr}, {"ip", "fd00::5"}}.dump());
  EXPECT_FALSE(stopped.sled_id);
  auto detached = DecodesKeepingEveryKey<IpDetachCompleted>(
      Json{{"ip_id", kC}, {"did_detach", true}, {"ip", OldIpRecord()}}.dump());
  EXPECT_TRUE(detached.did_detach);
  EXPECT_EQ(detached.ip.parent_id, U(kA));
}

TEST(OldSagaLogs, AttachOutputsDecodeWithAndWithoutTheRecordedRow) {
  auto completed =
      DecodesKeepingEveryKey<IpCompleted>(Json{{"ip_id", kC}, {"ip", OldIpRecord()}}.dump());
  ASSERT_TRUE(completed.ip);
  EXPECT_EQ(completed.ip->name, "web");
  EXPECT_EQ(completed.ip->kind, model::IpKind::kFloating);
  EXPECT_EQ(completed.ip->state, model::AttachState::kAttached);
  EXPECT_EQ(completed.ip->ip, *IpAddr::Parse("10.0.0.3"));
  EXPECT_EQ(completed.ip->time_modified, 1700000000000003);
  // Logged before the row was recorded: the id alone.
  auto id_only = DecodesKeepingEveryKey<IpCompleted>(Json{{"ip_id", kC}}.dump());
  EXPECT_EQ(id_only.ip_id, U(kC));
  EXPECT_FALSE(id_only.ip);
  // ip_detach's output reads as IpCompleted too (the replay of either).
  auto detach = Decode<IpCompleted>(
      Json{{"ip_id", kC}, {"did_detach", false}, {"ip", OldIpRecord()}}, "test");
  ASSERT_TRUE(detach && detach->ip);
}

TEST(OldSagaLogs, AMalformedValueIsAnInternalError) {
  auto bad_id = Decode<InstanceStartSagaParams>(Json{{"instance_id", "not-a-uuid"}}, "test");
  ASSERT_FALSE(bad_id);
  EXPECT_EQ(bad_id.error().kind(), ErrorKind::kInternal);
  auto missing = Decode<InstancePlaced>(Json::object(), "test");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().kind(), ErrorKind::kInternal);
  Json record = OldInstanceRecord();
  record["state"] = "sleeping";
  EXPECT_FALSE(Decode<InstanceCreated>(Json{{"instance", record}}, "test"));
}

}  // namespace
}  // namespace fp::app
