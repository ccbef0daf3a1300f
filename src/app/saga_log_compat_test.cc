// The saga logs that the string-keyed code before the typed saga parameters wrote: each is
// hand-written here exactly as that code wrote it (app/instance_sagas.cc, app/external_ips.cc,
// app/instances.cc of that time), and must still decode into today's structs, keeping every
// key; and a saga persisted by the older binary is resumed by this one after an upgrade.

#include <gtest/gtest.h>

#include "app/sagas/instance_create.h"
#include "app/sagas/instance_delete.h"
#include "app/sagas/instance_migrate.h"
#include "app/sagas/instance_start.h"
#include "app/sagas/ip_attach.h"
#include "app/sagas/ip_detach.h"
#include "app/sagas/ip_steps.h"
#include "app/testing/instance_world.h"
#include "db/attach.h"
#include "db/nat.h"
#include "db/sagas.h"

namespace fp::app {
namespace {

using db::testing::ByName;
using saga::Json;
using testing::AttachSagaTest;
using testing::World;

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
  EXPECT_TRUE(p->snat) << "every instance had SNAT before it was a choice";
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

// --- Resumed after an upgrade ---

// Writes a saga as the older binary logged it, owned by the test's executor: `dag` is the DAG's
// JSON as that binary wrote it, and node k of `outputs` succeeded with that output. The effects
// of those nodes are the caller's to apply.
Status WriteOldSaga(db::Datastore& ds, const Uuid& id, const saga::Json& dag,
                    const std::vector<saga::Json>& outputs) {
  db::SagaRow row;
  row.id = id;
  row.name = dag.at("name").get<std::string>();
  row.dag = dag.dump();
  row.owner = db::SagaOwner{"test-sec", 1};
  db::DatastoreSagaStore store(ds);
  FP_TRY(store.Create(row));
  for (size_t k = 0; k < outputs.size(); ++k) {
    const int node = static_cast<int>(k);
    FP_CHECK_OK(store.Record(id, row.owner, db::SagaEvent{node, db::SagaEventType::kStarted},
                             std::nullopt, std::nullopt));
    FP_CHECK_OK(store.Record(id, row.owner,
                             db::SagaEvent{node, db::SagaEventType::kSucceeded, outputs[k].dump()},
                             std::nullopt, std::nullopt));
  }
  return Ok();
}

saga::Json OldNodes(const std::string& saga, const std::vector<std::string>& nodes) {
  saga::Json out = saga::Json::array();
  for (const std::string& n : nodes) {
    std::string action = n.rfind("external_ip_", 0) == 0 ? "external_ip" : n;
    out.push_back(saga::Json{{"name", n}, {"action", saga + "." + action}});
  }
  return out;
}

TEST_F(AttachSagaTest, AnInstanceCreateLoggedByTheOlderBinaryResumes) {
  model::ExternalIp fip = Fip("web");
  const Uuid saga_id = Uuid::Random(), instance_id = Uuid::Random();
  saga::Json params{
      {"instance_id", instance_id.ToString()},
      {"nic_id", Uuid::Random().ToString()},
      {"snat_id", Uuid::Random().ToString()},
      {"project_id", db::ProjectLookup(*ds, silo_.id, ByName("p1"))->id.ToString()},
      {"silo_id", silo_.id.ToString()},
      {"name", "old-vm"},
      {"description", ""},
      {"hostname", "old-vm"},
      {"ncpus", 1},
      {"memory", uint64_t{1} << 30},
      {"nic", "dual_stack"},
      {"start", false},
      {"external_ips",
       saga::Json::array({saga::Json{{"type", "floating"}, {"ip_id", fip.id.ToString()}},
                          saga::Json{{"type", "ephemeral"},
                                     {"ip_id", Uuid::Random().ToString()},
                                     {"ip_version", "v4"}}})}};
  saga::Json dag{{"name", "instance_create"},
                 {"params", params},
                 {"nodes", OldNodes("instance_create", {"record", "snat", "external_ip_0",
                                                        "external_ip_1", "finish"})}};
  ASSERT_TRUE(WriteOldSaga(*ds, saga_id, dag, {}));
  auto outcome = exec_->Resume(saga_id);
  ASSERT_TRUE(outcome) << outcome.error().message();
  ASSERT_EQ(outcome->kind, saga::SagaResultKind::kDone)
      << (outcome->error ? outcome->error->message() : "");
  auto replayed = instances_->InstanceOfSaga(Unrecorded{actor_}, params, outcome->output);
  ASSERT_TRUE(replayed) << replayed.error().message();
  EXPECT_EQ(replayed->id, instance_id);
  EXPECT_EQ(replayed->name, "old-vm");
  EXPECT_EQ(replayed->run_state, model::RunState::kStopped);
  auto ips = instances_->ExternalIps(actor_, NameOrId(instance_id), std::nullopt);
  ASSERT_TRUE(ips) << ips.error().message();
  EXPECT_EQ(ips->size(), 3u);  // SNAT, floating, ephemeral
  EXPECT_EQ(db::FloatingIpLookupById(*ds, silo_.id, fip.id)->parent_id, instance_id);
}

// The start's `place` node had run under the older binary: the nodes after it read the sled
// from that node's output as the older binary wrote it.
TEST_F(AttachSagaTest, AnInstanceStartLoggedByTheOlderBinaryResumesOnItsSled) {
  auto vm = *instances_->Create(Unrecorded{actor_}, ByName("p1"), Params("vm", false));
  const Uuid saga_id = Uuid::Random();
  const Uuid sled = sled_ids_[1];
  ASSERT_TRUE(ds->Write<bool>([&](db::Tx& tx) -> Result<bool> {
    FP_TRY(db::InstanceBeginStartIn(tx, vm.id, sled, saga_id));
    return true;
  }));
  saga::Json dag{{"name", "instance_start"},
                 {"params", saga::Json{{"instance_id", vm.id.ToString()}}},
                 {"nodes", OldNodes("instance_start", {"place", "nat", "sled", "switch"})}};
  ASSERT_TRUE(WriteOldSaga(*ds, saga_id, dag, {saga::Json{{"sled_id", sled.ToString()}}}));
  auto outcome = exec_->Resume(saga_id);
  ASSERT_TRUE(outcome) << outcome.error().message();
  ASSERT_EQ(outcome->kind, saga::SagaResultKind::kDone)
      << (outcome->error ? outcome->error->message() : "");
  EXPECT_EQ(instances_->Lookup(actor_, NameOrId(vm.id), std::nullopt)->sled_id, sled);
  EXPECT_TRUE(sled_sims_[1]->Instance(vm.id));
  World w = Observe();
  EXPECT_EQ(w.nat_rows.size(), 1u);
  EXPECT_EQ(w.switch_nat, w.nat_rows);
}

// An attach whose `begin` node ran under the older binary, then a detach it logged and never
// ran: both finish under this one, and their replies decode.
TEST_F(AttachSagaTest, AnAttachAndADetachLoggedByTheOlderBinaryResume) {
  model::Instance vm = Running("vm");
  model::ExternalIp fip = Fip("web");
  const Uuid attach_id = Uuid::Random();
  auto step = ds->Write<db::AttachStep>([&](db::Tx& tx) -> Result<db::AttachStep> {
    db::AttachRequest req;
    req.ip_id = fip.id;
    req.instance_id = vm.id;
    req.saga_id = attach_id;
    db::AttachStep s = FP_TRY(db::BeginAttachIn(tx, req));
    FP_TRY(db::NatEnsureForIpIn(tx, s.ip, vm.id, *s.sled));
    return s;
  });
  ASSERT_TRUE(step && step->sled) << (step ? "no sled" : step.error().message());
  saga::Json attach{{"name", "ip_attach"},
                    {"params", saga::Json{{"kind", "floating"},
                                          {"ip_id", fip.id.ToString()},
                                          {"instance_id", vm.id.ToString()},
                                          {"silo_id", silo_.id.ToString()}}},
                    {"nodes", OldNodes("ip_attach", {"begin", "dataplane", "complete"})}};
  ASSERT_TRUE(WriteOldSaga(*ds, attach_id, attach,
                           {saga::Json{{"ip_id", fip.id.ToString()},
                                       {"do_saga", true},
                                       {"sled_id", step->sled->id.ToString()},
                                       {"ip", step->ip.ip.ToString()}}}));
  auto attached = exec_->Resume(attach_id);
  ASSERT_TRUE(attached) << attached.error().message();
  ASSERT_EQ(attached->kind, saga::SagaResultKind::kDone)
      << (attached->error ? attached->error->message() : "");
  auto ip = instances_->IpOfSagaOutput(attached->output);
  ASSERT_TRUE(ip) << ip.error().message();
  EXPECT_EQ(ip->parent_id, vm.id);
  EXPECT_EQ(ip->state, model::AttachState::kAttached);
  World w = Observe();
  EXPECT_EQ(w.nat_rows.size(), 2u);  // SNAT, floating
  EXPECT_EQ(w.switch_nat, w.nat_rows);
  ASSERT_EQ(w.sled_vms.size(), 1u);
  EXPECT_NE(w.sled_vms[0].find(fip.ip.ToString()), std::string::npos);

  const Uuid detach_id = Uuid::Random();
  saga::Json detach{{"name", "ip_detach"},
                    {"params", saga::Json{{"kind", "floating"},
                                          {"ip_id", fip.id.ToString()},
                                          {"instance_id", vm.id.ToString()}}},
                    {"nodes", OldNodes("ip_detach", {"begin", "dataplane", "complete"})}};
  ASSERT_TRUE(WriteOldSaga(*ds, detach_id, detach, {}));
  auto detached = exec_->Resume(detach_id);
  ASSERT_TRUE(detached) << detached.error().message();
  ASSERT_EQ(detached->kind, saga::SagaResultKind::kDone)
      << (detached->error ? detached->error->message() : "");
  ip = instances_->IpOfSagaOutput(detached->output);
  ASSERT_TRUE(ip) << ip.error().message();
  EXPECT_FALSE(ip->parent_id);
  EXPECT_EQ(Observe().nat_rows.size(), 1u);
  ExpectNoSagaStuckOrUnfinished();
}

}  // namespace
}  // namespace fp::app
