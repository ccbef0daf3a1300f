// Oxide's saga scaffolds (omicron-behaviour.md §7.3) for the instance sagas, against the real
// datastore and simulated agents over HTTP on loopback: failure at each node unwinds to a
// clean slate with no stuck saga; every action run twice gives the same result; an undo run
// twice still unwinds cleanly.

#include <gtest/gtest.h>

#include "app/sagas/instance_create.h"
#include "app/sagas/instance_delete.h"
#include "app/sagas/instance_migrate.h"
#include "app/sagas/instance_start.h"
#include "app/sagas/ip_attach.h"
#include "app/sagas/ip_detach.h"
#include "app/sagas/ip_steps.h"
#include "app/sagas/json.h"
#include "app/sagas/vm_steps.h"
#include "app/testing/instance_world.h"
#include "db/sagas.h"
#include "db/sleds.h"

namespace fp::app {
namespace {

using db::testing::ByName;
using testing::AttachSagaTest;
using testing::InstanceSagaTest;
using testing::World;

// A node reads an earlier node's output in place, as its type; one that does not decode, or a
// node that has not succeeded, is Internal naming the node.
TEST(OutputOfTest, DecodesTheRecordedOutputAndNamesTheNodeWhenItCannot) {
  const Uuid saga_id = Uuid::Random();
  const saga::Json params = saga::Json::object();
  IpBegun begun{.ip_id = Uuid::Random(), .do_saga = true, .ip = IpAddr::Parse("192.0.2.9").value()};
  std::map<std::string, saga::Json> outputs{{"begin", begun}, {"odd", {{"ip", 5}}}};
  saga::ActionContext ctx(saga_id, params, outputs, "dataplane");
  IpBegun read = OutputOf<IpBegun>(ctx, "begin").value();
  EXPECT_EQ(read.ip_id, begun.ip_id);
  EXPECT_EQ(read.ip, begun.ip);
  EXPECT_TRUE(read.do_saga);
  auto odd = OutputOf<IpBegun>(ctx, "odd");
  ASSERT_FALSE(odd);
  EXPECT_EQ(odd.error().kind(), ErrorKind::kInternal);
  EXPECT_EQ(odd.error().message().rfind("saga output of node \"odd\" is malformed: ", 0), 0u)
      << odd.error().message();
  auto missing = OutputOf<IpBegun>(ctx, "complete");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message().find("\"complete\", which has not succeeded"),
            std::string::npos)
      << missing.error().message();
}

// An agent call names the request its saga serves: the id the request's own run has at hand,
// else (a saga resumed after a restart) the one its origin text names.
TEST(CallForTest, NamesTheRequestFromTheRunElseFromTheOrigin) {
  const Uuid saga_id = Uuid::Random();
  const saga::Json params = saga::Json::object();
  const std::map<std::string, saga::Json> outputs;
  const std::string origin = R"({"actor":{"kind":"silo_user"},"request_id":"from-origin"})";
  saga::ActionContext own(saga_id, params, outputs, "dataplane", origin, "from-run");
  EXPECT_EQ(CallFor(own).request_id, "from-run");
  EXPECT_EQ(CallFor(own).saga_id, saga_id.ToString());
  saga::ActionContext resumed(saga_id, params, outputs, "dataplane", origin);
  EXPECT_EQ(CallFor(resumed).request_id, "from-origin");
  saga::ActionContext unnamed(saga_id, params, outputs, "dataplane", R"({"request_id":7})");
  EXPECT_EQ(CallFor(unnamed).request_id, "");
  EXPECT_EQ(CallFor(saga::ActionContext(saga_id, params, outputs, "dataplane")).request_id, "");
}

// Node counts come from the definitions the operations use: a node added to a saga is failed,
// and unwound from, like the others.
const int kCreateNodes = static_cast<int>(InstanceCreateNodes(0).size());
const int kStartNodes = static_cast<int>(InstanceStartNodes().size());
const int kMigrateNodes = static_cast<int>(InstanceMigrateNodes().size());
const int kDeleteNodes = static_cast<int>(InstanceDeleteNodes().size());
const int kAttachNodes = static_cast<int>(IpAttachNodes().size());
const int kDetachNodes = static_cast<int>(IpDetachNodes().size());

TEST_F(InstanceSagaTest, CreateFailingAtEachNodeLeavesACleanSlate) {
  World before = Observe();
  for (int node = 0; node < kCreateNodes; ++node) {
    Faults("instance_create", {.fail_node = node});
    auto r = instances_->Create(Unrecorded{actor_}, ByName("p1"), Params("vm", false));
    ASSERT_FALSE(r) << "node " << node;
    EXPECT_NE(r.error().message().find("injected failure at node " + std::to_string(node)),
              std::string::npos)
        << r.error().message();
    EXPECT_EQ(Observe(), before) << "after failing node " << node;
  }
  ExpectNoSagaStuckOrUnfinished();
}

// Issue 25 item 3: with a default IPv6 pool, a dual-stack instance takes an IPv6 SNAT block
// besides its IPv4 one; both reach the switch and the sled (the spec's snat6 fields); a create
// failing at any node leaves neither; the delete releases both. An IPv6-only instance takes
// none (as in Oxide), nor one created without SNAT.
TEST_F(InstanceSagaTest, ADualStackInstanceTakesAnIpv6SnatBlockFromTheDefaultIpv6Pool) {
  model::PoolCreate pc;
  pc.id = Uuid::Random();
  pc.name = "v6";
  pc.description = "";
  pc.ip_version = IpVersion::kV6;
  auto v6 = *db::PoolCreate(*ds, pc);
  ASSERT_TRUE(db::RangeAdd(*ds, v6.id, Uuid::Random(), db::testing::Range("fd00::10", "fd00::13")));
  ASSERT_TRUE(db::Link(*ds, v6.id, NameOrId(silo_.id), true));
  World before = Observe();
  for (int node = 0; node < kCreateNodes; ++node) {
    Faults("instance_create", {.fail_node = node});
    ASSERT_FALSE(instances_->Create(Unrecorded{actor_}, ByName("p1"), Params("dual", true)));
    EXPECT_EQ(Observe(), before) << "after failing node " << node;
  }
  Faults("instance_create", {});
  model::Instance vm = Running("dual");
  std::vector<std::string> snat;
  auto ips = db::InstanceExternalIps(*ds, vm.id);  // named: a range-for over *temporary dangles
  for (const auto& e : *ips) {
    if (e.kind == model::IpKind::kSnat) snat.push_back(e.ip.ToString());
  }
  EXPECT_EQ(snat, (std::vector<std::string>{"10.0.0.0", "fd00::10"}));
  World w = Observe();
  EXPECT_EQ(w.nat_rows.size(), 2u);
  EXPECT_EQ(w.switch_nat, w.nat_rows);
  auto vms = sled_sims_[0]->Instances();
  for (const auto& other : sled_sims_[1]->Instances()) vms.push_back(other);
  ASSERT_EQ(vms.size(), 1u);
  EXPECT_EQ(vms[0].snat6_ip, IpAddr::Parse("fd00::10").value());
  EXPECT_EQ(db::Utilization(*ds, v6.id)->remaining, 3);

  auto v6_only = Params("six", false);
  v6_only.nic = model::NicKind::kIpv6;
  auto six = instances_->Create(Unrecorded{actor_}, ByName("p1"), v6_only);
  ASSERT_TRUE(six) << six.error().message();
  EXPECT_TRUE(db::InstanceExternalIps(*ds, six->id)->empty());
  auto dark = Params("dark", false);
  dark.snat = false;
  auto none = instances_->Create(Unrecorded{actor_}, ByName("p1"), dark);
  ASSERT_TRUE(none) << none.error().message();
  EXPECT_TRUE(db::InstanceExternalIps(*ds, none->id)->empty());

  ASSERT_TRUE(instances_->Stop(Unrecorded{actor_}, NameOrId(vm.id), std::nullopt));
  ASSERT_TRUE(fp::testing::WaitFor([&] {
    watcher_->WatchOnce();
    return instances_->Lookup(actor_, NameOrId(vm.id), std::nullopt)->state ==
           model::InstanceState::kNoVmm;
  }));
  ASSERT_TRUE(instances_->Delete(Unrecorded{actor_}, NameOrId(vm.id), std::nullopt));
  EXPECT_EQ(db::Utilization(*ds, v6.id)->remaining, 4) << "the delete released the IPv6 block";

  // No room for it (an IPv6 quota of 0, then a full pool): the create still succeeds, with
  // the IPv4 block alone, and takes nothing from the IPv6 pool.
  ASSERT_TRUE(ds->Write([&](db::Tx& tx) -> Status {
    FP_TRY(tx.Exec("UPDATE project SET ipv6_quota = 0"));
    return Ok();
  }));
  auto capped = instances_->Create(Unrecorded{actor_}, ByName("p1"), Params("capped", false));
  ASSERT_TRUE(capped) << capped.error().message();
  ASSERT_EQ(db::InstanceExternalIps(*ds, capped->id)->size(), 1u);
  EXPECT_EQ(db::InstanceExternalIps(*ds, capped->id)->front().ip.version(), IpVersion::kV4);
  EXPECT_EQ(db::Utilization(*ds, v6.id)->remaining, 4);
  ASSERT_TRUE(ds->Write([&](db::Tx& tx) -> Status {
    FP_TRY(tx.Exec("UPDATE project SET ipv6_quota = NULL"));
    return Ok();
  }));
  for (int n = 0; n < 16; ++n) {  // four addresses of four blocks each
    auto taken = instances_->Create(Unrecorded{actor_}, ByName("p1"),
                                    Params("fill-" + std::to_string(n), false));
    ASSERT_TRUE(taken) << n << ": " << taken.error().message();
  }
  EXPECT_EQ(db::Utilization(*ds, v6.id)->remaining, 0);
  auto full = instances_->Create(Unrecorded{actor_}, ByName("p1"), Params("full", false));
  ASSERT_TRUE(full) << full.error().message();
  EXPECT_EQ(db::InstanceExternalIps(*ds, full->id)->size(), 1u);
}

TEST_F(InstanceSagaTest, CreateUndoRunTwiceStillCleans) {
  World before = Observe();
  for (int node = 1; node < kCreateNodes; ++node) {
    Faults("instance_create", {.fail_node = node, .repeat_undo_node = node - 1});
    ASSERT_FALSE(instances_->Create(Unrecorded{actor_}, ByName("p1"), Params("vm", false)));
    EXPECT_EQ(Observe(), before) << "after failing node " << node;
  }
  ExpectNoSagaStuckOrUnfinished();
}

TEST_F(InstanceSagaTest, CreateWithEveryActionTwiceGivesOneInstanceAndOneSnat) {
  Faults("instance_create", {.repeat_every_action = true});
  auto r = instances_->Create(Unrecorded{actor_}, ByName("p1"), Params("vm", false));
  ASSERT_TRUE(r) << r.error().message();
  World w = Observe();
  EXPECT_EQ(w.instances.size(), 1u);
  ASSERT_EQ(w.external_ips.size(), 1u);
  EXPECT_NE(w.external_ips[0].find("/snat/attached/"), std::string::npos);
  EXPECT_EQ(w.remaining, 7.0);
}

TEST_F(InstanceSagaTest, StartFailingAtEachNodeLeavesACleanSlate) {
  auto vm = *instances_->Create(Unrecorded{actor_}, ByName("p1"), Params("vm", false));
  World before = Observe();
  for (int node = 0; node < kStartNodes; ++node) {
    Faults("instance_start", {.fail_node = node});
    auto r = instances_->Start(Unrecorded{actor_}, NameOrId(vm.id), std::nullopt);
    ASSERT_FALSE(r) << "node " << node;
    EXPECT_EQ(Observe(), before) << "after failing node " << node;
  }
  for (int node = 1; node < kStartNodes; ++node) {
    Faults("instance_start", {.fail_node = node, .repeat_undo_node = node - 1});
    ASSERT_FALSE(instances_->Start(Unrecorded{actor_}, NameOrId(vm.id), std::nullopt));
    EXPECT_EQ(Observe(), before) << "undo twice, after failing node " << node;
  }
  ExpectNoSagaStuckOrUnfinished();
}

// A start's push to the switches goes from the read its NAT step made at commit (on PostgreSQL
// right after it, in the COMMIT's exchange); a start that wrote no NAT rows (no address:
// nothing to push) made none, and its plain Sync counts as no missed read (the metric of pushes
// that found theirs gone).
TEST_F(InstanceSagaTest, AStartPushesFromItsNatStepsReadAndOneWithoutAddressesMissesNone) {
  ASSERT_TRUE(nat_->Sync());  // the switch answered: reads start from where it is
  auto lit = instances_->Create(Unrecorded{actor_}, ByName("p1"), Params("lit", false));
  ASSERT_TRUE(lit) << lit.error().message();
  ASSERT_TRUE(instances_->Start(Unrecorded{actor_}, NameOrId(lit->id), std::nullopt));
  EXPECT_EQ(nat_->KeptReads().used, 1);
  auto dark = Params("dark", false);
  dark.snat = false;
  dark.nic = model::NicKind::kIpv4;
  auto none = instances_->Create(Unrecorded{actor_}, ByName("p1"), dark);
  ASSERT_TRUE(none) << none.error().message();
  EXPECT_TRUE(db::InstanceExternalIps(*ds, none->id)->empty());
  ASSERT_TRUE(instances_->Start(Unrecorded{actor_}, NameOrId(none->id), std::nullopt));
  EXPECT_EQ(nat_->KeptReads().used, 1);
  EXPECT_EQ(nat_->KeptReads().missed, 0);
  EXPECT_EQ(nat_->KeptReads().dropped, 0);
}

TEST_F(InstanceSagaTest, StartWithEveryActionTwiceRunsOnceEverywhere) {
  auto vm = *instances_->Create(Unrecorded{actor_}, ByName("p1"), Params("vm", false));
  Faults("instance_start", {.repeat_every_action = true});
  auto r = instances_->Start(Unrecorded{actor_}, NameOrId(vm.id), std::nullopt);
  ASSERT_TRUE(r) << r.error().message();
  World w = Observe();
  EXPECT_EQ(w.sled_vms.size(), 1u);
  EXPECT_EQ(w.nat_rows.size(), 1u);
  EXPECT_EQ(w.switch_nat, w.nat_rows);
}

TEST_F(InstanceSagaTest, DeleteFailingLeavesTheInstanceUntouched) {
  auto vm = *instances_->Create(Unrecorded{actor_}, ByName("p1"), Params("vm", false));
  World before = Observe();
  for (int node = 0; node < kDeleteNodes; ++node) {
    Faults("instance_delete", {.fail_node = node});
    ASSERT_FALSE(instances_->Delete(Unrecorded{actor_}, NameOrId(vm.id), std::nullopt))
        << "node " << node;
    EXPECT_EQ(Observe(), before) << "after failing node " << node;
  }
  Faults("instance_delete", {.repeat_every_action = true});
  ASSERT_TRUE(instances_->Delete(Unrecorded{actor_}, NameOrId(vm.id), std::nullopt));
  World after = Observe();
  EXPECT_TRUE(after.instances.empty());
  EXPECT_TRUE(after.external_ips.empty());
  EXPECT_EQ(after.remaining, 8.0);
  ExpectNoSagaStuckOrUnfinished();
}

TEST_F(InstanceSagaTest, DeleteOfARunningInstanceChangesNothing) {
  model::Instance vm = Running("vm");
  World before = Observe();
  auto r = instances_->Delete(Unrecorded{actor_}, NameOrId(vm.id), std::nullopt);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find(
                "cannot delete instance: instance is running or has not yet fully stopped"),
            std::string::npos);
  EXPECT_EQ(Observe(), before);
  EXPECT_FALSE(before.switch_nat.empty());
}

// A create under a name in use is refused from a read: no saga row, no trip through the write
// lane (a benchmark's refused creates had each written and unwound a whole saga).
TEST_F(InstanceSagaTest, ADuplicateNameIsRefusedBeforeAnySagaIsWritten) {
  ASSERT_TRUE(instances_->Create(Unrecorded{actor_}, ByName("p1"), Params("vm", false)));
  auto sagas_before = db::SagaListStates(*ds, 1000);
  ASSERT_TRUE(sagas_before);
  World before = Observe();
  const int64_t commits = ds->durable_commits();
  auto r = instances_->Create(Unrecorded{actor_}, ByName("p1"), Params("vm", false));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind(), ErrorKind::kObjectAlreadyExists);
  EXPECT_EQ(r.error().message(), "already exists: instance \"vm\"");
  EXPECT_EQ(ds->durable_commits(), commits);
  EXPECT_EQ(db::SagaListStates(*ds, 1000)->size(), sagas_before->size());
  EXPECT_EQ(Observe(), before);
}

TEST_F(InstanceSagaTest, MigrateFailingAtEachNodeLeavesItRunningWhereItWas) {
  model::Instance vm = Running("vm");
  Uuid dst = *vm.sled_id == sled_ids_[0] ? sled_ids_[1] : sled_ids_[0];
  World before = Observe();
  for (int node = 0; node < kMigrateNodes; ++node) {
    Faults("instance_migrate", {.fail_node = node});
    ASSERT_FALSE(instances_->Migrate(Unrecorded{actor_}, NameOrId(vm.id), std::nullopt, dst))
        << node;
    EXPECT_EQ(Observe(), before) << "after failing node " << node;
  }
  for (int node = 1; node < kMigrateNodes; ++node) {
    Faults("instance_migrate", {.fail_node = node, .repeat_undo_node = node - 1});
    ASSERT_FALSE(instances_->Migrate(Unrecorded{actor_}, NameOrId(vm.id), std::nullopt, dst))
        << node;
    EXPECT_EQ(Observe(), before) << "undo twice, after failing node " << node;
  }
  ExpectNoSagaStuckOrUnfinished();
}

// After the finish node the database places the instance on the destination, but until the
// saga settles an unwind may move it back: a watcher pass (reaper included) in between must not
// take the source VM for an orphan. Here the source node fails and the migration unwinds.
TEST_F(InstanceSagaTest, AWatcherPassAfterTheFinishNodeLeavesTheSourceVmAlone) {
  model::Instance vm = Running("vm");
  Uuid dst = *vm.sled_id == sled_ids_[0] ? sled_ids_[1] : sled_ids_[0];
  World before = Observe();
  Faults("instance_migrate",
         {.fail_node = 4, .call_after_node = 2, .after_node_call = [&] { watcher_->WatchOnce(); }});
  ASSERT_FALSE(instances_->Migrate(Unrecorded{actor_}, NameOrId(vm.id), std::nullopt, dst));
  EXPECT_EQ(Observe(), before);
  watcher_->WatchOnce();
  EXPECT_EQ(Observe(), before) << "after a watcher pass";
  ExpectNoSagaStuckOrUnfinished();
}

TEST_F(InstanceSagaTest, MigrateWithEveryActionTwiceMovesTheInstanceAndItsNat) {
  model::Instance vm = Running("vm");
  Uuid dst = *vm.sled_id == sled_ids_[0] ? sled_ids_[1] : sled_ids_[0];
  Faults("instance_migrate", {.repeat_every_action = true});
  auto moved = instances_->Migrate(Unrecorded{actor_}, NameOrId(vm.id), std::nullopt, dst);
  ASSERT_TRUE(moved) << moved.error().message();
  EXPECT_EQ(moved->sled_id, dst);
  World w = Observe();
  size_t dst_index = dst == sled_ids_[0] ? 0 : 1;
  ASSERT_EQ(w.sled_vms.size(), 1u);
  EXPECT_EQ(w.sled_vms[0].substr(0, 1), std::to_string(dst_index));
  auto sled = *db::SledGet(*ds, dst);
  ASSERT_EQ(w.switch_nat.size(), 1u);
  EXPECT_NE(w.switch_nat[0].find(sled.underlay_address.ToString()), std::string::npos);
  EXPECT_EQ(w.switch_nat, w.nat_rows);
}

// --- Live attach and detach (omicron-behaviour.md §7.3) ---

TEST_F(AttachSagaTest, AttachFailingAtEachNodeLeavesACleanSlate) {
  model::Instance vm = Running("vm");
  model::ExternalIp fip = Fip("web");
  for (const std::string kind : {"floating", "ephemeral"}) {
    World before = Observe();
    for (int node = 0; node < kAttachNodes; ++node) {
      Faults("ip_attach", {.fail_node = node});
      ASSERT_FALSE(Attach(kind, vm, &fip)) << kind << " node " << node;
      EXPECT_EQ(Observe(), before) << kind << ", after failing node " << node;
    }
    for (int node = 1; node < kAttachNodes; ++node) {
      Faults("ip_attach", {.fail_node = node, .repeat_undo_node = node - 1});
      ASSERT_FALSE(Attach(kind, vm, &fip)) << kind << " node " << node;
      EXPECT_EQ(Observe(), before) << kind << ", undo twice, after failing node " << node;
    }
  }
  ExpectNoSagaStuckOrUnfinished();
}

TEST_F(AttachSagaTest, AttachWithEveryActionTwiceAttachesOnceEverywhere) {
  model::Instance vm = Running("vm");
  model::ExternalIp fip = Fip("web");
  Faults("ip_attach", {.repeat_every_action = true});
  for (const std::string kind : {"floating", "ephemeral"}) {
    auto ip = Attach(kind, vm, &fip);
    ASSERT_TRUE(ip) << kind << ": " << ip.error().message();
    EXPECT_EQ(ip->state, model::AttachState::kAttached);
  }
  World w = Observe();
  EXPECT_EQ(w.nat_rows.size(), 3u);  // SNAT, floating, ephemeral
  EXPECT_EQ(w.switch_nat, w.nat_rows);
  ASSERT_EQ(w.sled_vms.size(), 1u);
  EXPECT_NE(w.sled_vms[0].find(fip.ip.ToString()), std::string::npos);
}

// An attach naming both by id (the usual API call) checks the floating IP and the instance in
// its saga's first transaction, before the saga (saga::CreateCheck): no read transaction of
// its own (issue 26: there were two, then one; on PostgreSQL a round trip each); a detach by
// id looks its IP up there too, and detaches it from the holder it finds. The NAT feed
// for the switch is read as that transaction commits too: inside it on SQLite, in its
// COMMIT's exchange on PostgreSQL (db::NatChangesAtCommitIn). The errors are as before, the
// IP's first, and a refused attach writes nothing.
TEST_F(AttachSagaTest, AnAttachOrDetachByIdsChecksInItsSagasFirstTransaction) {
  model::Instance vm = Running("vm");
  model::ExternalIp fip = Fip("web");
  int64_t reads = ds->read_transactions();
  int64_t commits = ds->durable_commits();
  ASSERT_TRUE(Attach("floating", vm, &fip));
  EXPECT_EQ(ds->read_transactions() - reads, 0);
  EXPECT_EQ(ds->durable_commits() - commits, 2);
  reads = ds->read_transactions();
  commits = ds->durable_commits();
  ASSERT_TRUE(Detach("floating", vm, &fip));
  EXPECT_EQ(ds->read_transactions() - reads, 0) << "the IP's lookup is in the saga's first";
  EXPECT_EQ(ds->durable_commits() - commits, 2);
  EXPECT_EQ(Observe().switch_nat, Observe().nat_rows);

  // An ephemeral IP's attach and detach by the instance's id likewise.
  reads = ds->read_transactions();
  ASSERT_TRUE(Attach("ephemeral", vm, nullptr));
  EXPECT_EQ(ds->read_transactions() - reads, 0);
  reads = ds->read_transactions();
  ASSERT_TRUE(Detach("ephemeral", vm, nullptr));
  EXPECT_EQ(ds->read_transactions() - reads, 0);
  EXPECT_EQ(Observe().switch_nat, Observe().nat_rows);
  const size_t ephemeral_sagas = db::SagaListStates(*ds, 1000)->size();
  auto none =
      instances_->DetachEphemeral(Unrecorded{actor_}, NameOrId(vm.id), std::nullopt, std::nullopt);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().message(), "instance does not have an ephemeral IP attached");
  const Uuid no_vm = Uuid::Random();
  auto detach_no_vm =
      instances_->DetachEphemeral(Unrecorded{actor_}, NameOrId(no_vm), std::nullopt, std::nullopt);
  ASSERT_FALSE(detach_no_vm);
  EXPECT_EQ(detach_no_vm.error().kind(), ErrorKind::kNotFound);
  auto attach_no_vm =
      instances_->AttachEphemeral(Unrecorded{actor_}, NameOrId(no_vm), std::nullopt, {});
  ASSERT_FALSE(attach_no_vm);
  EXPECT_EQ(attach_no_vm.error().kind(), ErrorKind::kNotFound);
  EXPECT_EQ(db::SagaListStates(*ds, 1000)->size(), ephemeral_sagas);

  const Uuid nobody = Uuid::Random();
  const size_t sagas = db::SagaListStates(*ds, 1000)->size();
  commits = ds->durable_commits();
  auto unknown_vm = instances_->AttachFloating(Unrecorded{actor_}, NameOrId(fip.id), std::nullopt,
                                               NameOrId(nobody));
  ASSERT_FALSE(unknown_vm);
  EXPECT_EQ(unknown_vm.error().kind(), ErrorKind::kNotFound);
  EXPECT_NE(unknown_vm.error().message().find("instance"), std::string::npos)
      << unknown_vm.error().message();
  auto unknown_both = instances_->AttachFloating(Unrecorded{actor_}, NameOrId(nobody), std::nullopt,
                                                 NameOrId(nobody));
  ASSERT_FALSE(unknown_both);
  EXPECT_NE(unknown_both.error().message().find("floating-ip"), std::string::npos)
      << unknown_both.error().message();
  EXPECT_EQ(db::SagaListStates(*ds, 1000)->size(), sagas);
  EXPECT_EQ(ds->durable_commits(), commits);
}

// On PostgreSQL no transaction of an attach or a detach waits in the write queue: the first
// takes its NAT version under the turn's lock in its last exchange (db/nat.h), the others
// change the operation's own rows; one that collides (an ephemeral address's release shares
// the pool's free spans with other releases and allocations) reruns in the queue.
TEST_F(AttachSagaTest, OnPostgresNoTransactionOfAnAttachOrADetachWaitsInTheQueue) {
  for (const char* name :
       {"ip_attach.begin", "ip_detach.begin", "ip_attach.complete", "ip_detach.complete"}) {
    ASSERT_NE(registry_.Find(name), nullptr) << name;
    EXPECT_FALSE(registry_.Find(name)->joins_write_queue) << name;
  }
  if (!db::testing::OnPostgres()) GTEST_SKIP() << "SQLite has one writer and no queue";
  model::Instance vm = Running("vm");
  model::ExternalIp fip = Fip("web");
  const int64_t retries = ds->transaction_retries();
  const int64_t queued = ds->engine_stats().queued_transactions;
  ASSERT_TRUE(Attach("floating", vm, &fip));
  ASSERT_TRUE(Detach("floating", vm, &fip));
  ASSERT_EQ(ds->transaction_retries(), retries) << "a rerun queues: the count would say less";
  EXPECT_EQ(ds->engine_stats().queued_transactions, queued);
  EXPECT_EQ(Observe().switch_nat, Observe().nat_rows);
}

TEST_F(AttachSagaTest, DetachFailingAtEachNodeLeavesItAttached) {
  model::Instance vm = Running("vm");
  model::ExternalIp fip = Fip("web");
  ASSERT_TRUE(Attach("floating", vm, &fip));
  ASSERT_TRUE(Attach("ephemeral", vm, &fip));
  World attached = Observe();
  for (const std::string kind : {"floating", "ephemeral"}) {
    for (int node = 0; node < kDetachNodes; ++node) {
      Faults("ip_detach", {.fail_node = node});
      ASSERT_FALSE(Detach(kind, vm, &fip)) << kind << " node " << node;
      EXPECT_EQ(Observe(), attached) << kind << ", after failing node " << node;
    }
    for (int node = 1; node < kDetachNodes; ++node) {
      Faults("ip_detach", {.fail_node = node, .repeat_undo_node = node - 1});
      ASSERT_FALSE(Detach(kind, vm, &fip)) << kind << " node " << node;
      EXPECT_EQ(Observe(), attached) << kind << ", undo twice, after failing node " << node;
    }
  }
  ExpectNoSagaStuckOrUnfinished();
  Faults("ip_detach", {.repeat_every_action = true});
  ASSERT_TRUE(Detach("floating", vm, &fip));
  ASSERT_TRUE(Detach("ephemeral", vm, &fip));
  World detached = Observe();
  EXPECT_EQ(detached.nat_rows.size(), 1u);  // the SNAT alone
  EXPECT_EQ(detached.switch_nat, detached.nat_rows);
}

// The sled's port and the switches are told at once (ip_steps.cc): when either fails, what was
// asked of the sled is undone, whether the sled refused after applying it or the switch refused.
TEST_F(AttachSagaTest, AnAgentFailingMidAttachOrDetachLeavesThePortAsTheDatastore) {
  model::Instance vm = Running("vm");
  model::ExternalIp fip = Fip("web");
  const size_t on = static_cast<size_t>(std::find(sled_ids_.begin(), sled_ids_.end(), *vm.sled_id) -
                                        sled_ids_.begin());
  ASSERT_LT(on, sled_sims_.size());
  agents::daemon::FaultInjector& sw = switch_sim_->faults();
  agents::daemon::FaultInjector& sled = sled_sims_[on]->faults();
  using Rule = agents::daemon::FaultRule;
  const Rule switch_refuses{.endpoint = "POST /nat/changes", .fail_next = 1};
  const std::pair<agents::daemon::FaultInjector*, Rule> attach_faults[] = {
      {&sw, switch_refuses},
      {&sled, Rule{.endpoint = "PUT /instances/*/external-ips/*", .apply_then_fail = 1}}};
  World before = Observe();
  for (const auto& [agent, rule] : attach_faults) {
    agent->Add(rule);
    ASSERT_FALSE(Attach("floating", vm, &fip)) << rule.endpoint;
    EXPECT_EQ(Observe(), before) << "attach, " << rule.endpoint;
  }
  ASSERT_TRUE(Attach("floating", vm, &fip));
  World attached = Observe();
  ASSERT_NE(attached.sled_vms.at(0).find(fip.ip.ToString()), std::string::npos);
  const std::pair<agents::daemon::FaultInjector*, Rule> detach_faults[] = {
      {&sw, switch_refuses},
      {&sled, Rule{.endpoint = "DELETE /instances/*/external-ips/*", .apply_then_fail = 1}}};
  for (const auto& [agent, rule] : detach_faults) {
    agent->Add(rule);
    ASSERT_FALSE(Detach("floating", vm, &fip)) << rule.endpoint;
    EXPECT_EQ(Observe(), attached) << "detach, " << rule.endpoint;
  }
  ExpectNoSagaStuckOrUnfinished();
}

TEST_F(AttachSagaTest, CreateWithExternalIpsFailingAtEachNodeLeavesACleanSlate) {
  model::ExternalIp fip = Fip("web");
  InstanceCreateParams p = Params("vm", false);
  RequestedExternalIp floating;
  floating.ephemeral = false;
  floating.floating_ip = NameOrId(fip.id);
  RequestedExternalIp ephemeral;  // from the silo's default pool
  p.external_ips = {floating, ephemeral};
  // record, snat, external_ip_0, external_ip_1, finish
  const int kNodes = static_cast<int>(InstanceCreateNodes(p.external_ips.size()).size());
  World before = Observe();
  for (int node = 0; node < kNodes; ++node) {
    Faults("instance_create", {.fail_node = node});
    ASSERT_FALSE(instances_->Create(Unrecorded{actor_}, ByName("p1"), p)) << "node " << node;
    EXPECT_EQ(Observe(), before) << "after failing node " << node;
    EXPECT_FALSE(db::FloatingIpLookupById(*ds, silo_.id, fip.id)->parent_id);
  }
  for (int node = 1; node < kNodes; ++node) {
    Faults("instance_create", {.fail_node = node, .repeat_undo_node = node - 1});
    ASSERT_FALSE(instances_->Create(Unrecorded{actor_}, ByName("p1"), p)) << "node " << node;
    EXPECT_EQ(Observe(), before) << "undo twice, after failing node " << node;
  }
  ExpectNoSagaStuckOrUnfinished();
  Faults("instance_create", {.repeat_every_action = true});
  auto vm = instances_->Create(Unrecorded{actor_}, ByName("p1"), p);
  ASSERT_TRUE(vm) << vm.error().message();
  auto ips = *instances_->ExternalIps(actor_, NameOrId(vm->id), std::nullopt);
  EXPECT_EQ(ips.size(), 3u);  // SNAT, floating, ephemeral
  EXPECT_EQ(db::FloatingIpLookupById(*ds, silo_.id, fip.id)->parent_id, vm->id);
}

// The reply is the row the saga's last node committed, even when a concurrent request changes
// the IP before the reply is built (a detach here; an instance delete in the e2e race test).
TEST_F(AttachSagaTest, RepliesDescribeTheSagasOwnCommitNotALaterChange) {
  model::Instance vm = Running("vm");
  model::Instance other = Running("other");
  model::ExternalIp fip = Fip("web");
  Faults("ip_attach", {.call_after_node = kAttachNodes - 1,
                       .after_node_call = [&] { ASSERT_TRUE(Detach("floating", vm, &fip)); }});
  auto attached = Attach("floating", vm, &fip);
  ASSERT_TRUE(attached) << attached.error().message();
  EXPECT_EQ(attached->parent_id, vm.id);
  EXPECT_EQ(attached->state, model::AttachState::kAttached);
  EXPECT_FALSE(db::FloatingIpLookupById(*ds, silo_.id, fip.id)->parent_id);  // the hook did run

  Faults("ip_attach", {});
  ASSERT_TRUE(Attach("floating", vm, &fip));
  Faults("ip_detach", {.call_after_node = kDetachNodes - 1,
                       .after_node_call = [&] { ASSERT_TRUE(Attach("floating", other, &fip)); }});
  auto detached = instances_->DetachFloating(Unrecorded{actor_}, NameOrId(fip.id), std::nullopt);
  ASSERT_TRUE(detached) << detached.error().message();
  EXPECT_FALSE(detached->parent_id);
  EXPECT_EQ(detached->state, model::AttachState::kDetached);
  EXPECT_EQ(db::FloatingIpLookupById(*ds, silo_.id, fip.id)->parent_id, other.id);
}

TEST_F(AttachSagaTest, AttachAndDetachCostTwoDurableCommitsEach) {
  model::Instance vm = Running("vm");
  model::ExternalIp fip = Fip("web");
  int64_t before = ds->durable_commits();
  ASSERT_TRUE(Attach("floating", vm, &fip));
  EXPECT_EQ(ds->durable_commits() - before, 2);
  before = ds->durable_commits();
  ASSERT_TRUE(Detach("floating", vm, &fip));
  EXPECT_EQ(ds->durable_commits() - before, 2);
}

// Attaching a floating IP to the instance that already has it answers with the IP, as the
// saga would, without writing a saga; so does detaching a detached one.
TEST_F(AttachSagaTest, AttachingAgainToTheSameInstanceWritesNoSaga) {
  auto vm = *instances_->Create(Unrecorded{actor_}, ByName("p1"), Params("vm", false));
  model::ExternalIp fip = Fip("web");
  auto first = Attach("floating", vm, &fip);
  ASSERT_TRUE(first) << first.error().message();
  const size_t sagas = db::SagaListStates(*ds, 1000)->size();
  const int64_t commits = ds->durable_commits();
  auto again = Attach("floating", vm, &fip);
  ASSERT_TRUE(again) << again.error().message();
  EXPECT_EQ(again->parent_id, vm.id);
  EXPECT_EQ(again->state, model::AttachState::kAttached);
  EXPECT_EQ(again->ip, first->ip);
  EXPECT_EQ(ds->durable_commits(), commits);
  EXPECT_EQ(db::SagaListStates(*ds, 1000)->size(), sagas);

  // And detaching a detached IP answers with it as it is, likewise.
  ASSERT_TRUE(Detach("floating", vm, &fip));
  const size_t detached_sagas = db::SagaListStates(*ds, 1000)->size();
  const int64_t detached_commits = ds->durable_commits();
  auto unchanged = instances_->DetachFloating(Unrecorded{actor_}, NameOrId(fip.id), std::nullopt);
  ASSERT_TRUE(unchanged) << unchanged.error().message();
  EXPECT_EQ(unchanged->parent_id, std::nullopt);
  EXPECT_EQ(unchanged->state, model::AttachState::kDetached);
  EXPECT_EQ(unchanged->id, fip.id);
  EXPECT_EQ(ds->durable_commits(), detached_commits);
  EXPECT_EQ(db::SagaListStates(*ds, 1000)->size(), detached_sagas);
}

TEST_F(AttachSagaTest, AttachToAStoppedInstanceTouchesNoAgent) {
  auto vm = *instances_->Create(Unrecorded{actor_}, ByName("p1"), Params("vm", false));
  model::ExternalIp fip = Fip("web");
  auto ip = Attach("floating", vm, &fip);
  ASSERT_TRUE(ip) << ip.error().message();
  World w = Observe();
  EXPECT_TRUE(w.nat_rows.empty());
  EXPECT_TRUE(w.switch_nat.empty());
  EXPECT_TRUE(w.sled_vms.empty());
  // Starting it programs every attached address.
  ASSERT_TRUE(instances_->Start(Unrecorded{actor_}, NameOrId(vm.id), std::nullopt));
  World running = Observe();
  EXPECT_EQ(running.nat_rows.size(), 2u);
  EXPECT_EQ(running.switch_nat, running.nat_rows);
}

// Runs the undo of `node` of the newest unwound saga named `name` again, with its recorded
// outputs, as recovery does after a crash inside that undo (its effect applied, its "undo
// finished" event lost).
Status RerunUndo(db::Datastore& ds, const saga::ActionRegistry& registry, const std::string& name,
                 const std::string& node) {
  std::optional<Uuid> id;
  for (const auto& s : FP_TRY(db::SagaListStates(ds, 1000))) {
    if (s.name == name && s.state == db::SagaState::kUnwound) {
      id = s.id;
      break;
    }
  }
  if (!id) return Fail(Error::Internal("no unwound saga named " + name));
  db::SagaLog log = FP_TRY(db::SagaLoad(ds, *id));
  saga::SagaDag dag = FP_TRY(saga::SagaDag::FromJson(saga::Json::parse(log.saga.dag)));
  std::map<std::string, saga::Json> outputs;
  for (const auto& e : log.events) {
    if (e.type == db::SagaEventType::kSucceeded) {
      outputs[dag.nodes[static_cast<size_t>(e.node_index)].name] = saga::Json::parse(*e.data);
    }
  }
  for (const saga::Node& n : dag.nodes) {
    if (n.name == node) {
      return registry.Find(n.action)->undo(saga::ActionContext(*id, dag.params, outputs, node));
    }
  }
  return Fail(Error::Internal("no node " + node));
}

// An undo that runs again after a crash inside it may find the IP moved on by a later
// operation (recovery runs while the server serves): it must leave that operation's IP and NAT
// alone. Attach: the address is attached to another instance since (the ephemeral one too: the
// lowest free address). Detach: the address was detached since.
TEST_F(AttachSagaTest, AnAttachOrDetachUndoRunAgainLeavesALaterOperationAlone) {
  model::Instance vm = Running("vm");
  model::Instance other = Running("other");
  model::ExternalIp fip = Fip("web");
  for (const std::string kind : {"floating", "ephemeral"}) {
    Faults("ip_attach", {.fail_node = kAttachNodes - 1});
    ASSERT_FALSE(Attach(kind, vm, &fip)) << kind;
    Faults("ip_attach", {});
    auto later = Attach(kind, other, &fip);
    ASSERT_TRUE(later) << kind << ": " << later.error().message();
    World attached = Observe();
    Status again = RerunUndo(*ds, registry_, "ip_attach", "begin");
    ASSERT_TRUE(again) << kind << ": " << again.error().message();
    EXPECT_EQ(Observe(), attached) << kind << ": attach undo run again";

    Faults("ip_detach", {.fail_node = kAttachNodes - 1});
    ASSERT_FALSE(Detach(kind, other, &fip)) << kind;
    Faults("ip_detach", {});
    ASSERT_TRUE(Detach(kind, other, &fip)) << kind;
    World detached = Observe();
    again = RerunUndo(*ds, registry_, "ip_detach", "begin");
    ASSERT_TRUE(again) << kind << ": " << again.error().message();
    EXPECT_EQ(Observe(), detached) << kind << ": detach undo run again";
  }
  ExpectNoSagaStuckOrUnfinished();
}

}  // namespace
}  // namespace fp::app
