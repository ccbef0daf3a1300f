// Beginning and completing attach and detach (db/attach.h), on whichever engine the tests run
// on. On PostgreSQL each step is one statement whose SQL repeats the checks that word the
// errors, and a disagreement between the two is an internal error: so every verdict below, run
// on PostgreSQL, also proves the statement decides as the checks do.

#include "db/attach.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "db/external_ips.h"
#include "db/instances.h"
#include "db/ip_pools.h"
#include "db/nat.h"
#include "db/projects.h"
#include "db/sleds.h"
#include "db/testing/statement_trace.h"
#include "db/testing/temp_datastore.h"

namespace fp::db {
namespace {

using testing::CreateFip;
using testing::FromPool;
using testing::Ip;
using testing::MakeFixture;
using testing::TempDatastore;

class AttachTest : public ::testing::Test {
 protected:
  AttachTest() : f_(MakeFixture(*ds_, "10.0.0.0", "10.0.0.63")) {
    EXPECT_TRUE(Link(*ds_, f_.pool.id, NameOrId(f_.silo.id), true));
  }

  // A stopped instance (no VMM) with a primary NIC of `nic`, in `f`'s project on `ds`.
  static Uuid NewInstanceIn(Datastore& ds, const testing::Fixture& f, const std::string& name,
                            NicKind nic = NicKind::kIpv4) {
    InstanceCreate c;
    c.id = Uuid::Random();
    c.nic_id = Uuid::Random();
    c.project_id = f.project.id;
    c.name = name;
    c.hostname = name;
    c.memory = int64_t{1} << 30;
    c.nic = nic;
    EXPECT_TRUE(ds.Write([&](Tx& tx) -> Status {
      FP_TRY(InstanceCreateRecordIn(tx, c));
      return InstanceFinishCreateIn(tx, c.id);
    }));
    return c.id;
  }
  Uuid NewInstance(const std::string& name, NicKind nic = NicKind::kIpv4) {
    return NewInstanceIn(*ds_, f_, name, nic);
  }
  Uuid NewFip(const std::string& name) { return CreateFip(*ds_, f_, name).value().id; }
  // A detached ephemeral IP from the fixture's pool, as an ephemeral attach of `instance`
  // allocates it.
  Uuid NewEphemeral(const Uuid& instance) {
    PoolSelector selector;
    selector.mode = PoolSelector::Mode::kExplicitPool;
    selector.pool = testing::ByName("pool");
    Uuid id = Uuid::Random();
    EXPECT_TRUE(ds_->Write<ExternalIp>(
        [&](Tx& tx) { return EphemeralAllocateIn(tx, id, instance, f_.silo.id, selector); }));
    return id;
  }

  void Sql(const std::string& sql) {
    ASSERT_TRUE(ds_->Write([&](Tx& tx) -> Status {
      FP_TRY(tx.Exec(sql));
      return Ok();
    }));
  }

  Result<AttachStep> Begin(bool attach, const Uuid& ip, const Uuid& instance, const Uuid& saga,
                           IpKind kind = IpKind::kFloating, bool creating = false) {
    AttachRequest r{ip, kind, instance, saga, creating};
    return ds_->Write<AttachStep>(
        [&](Tx& tx) { return attach ? BeginAttachIn(tx, r) : BeginDetachIn(tx, r); });
  }
  Result<int64_t> Complete(const Uuid& ip, AttachState expected, AttachState target) {
    return ds_->Write<int64_t>([&](Tx& tx) { return CompleteOpIn(tx, ip, expected, target); });
  }
  // Attaches `ip` to `instance` (both steps); fails the test if either step fails.
  void Attach(const Uuid& ip, const Uuid& instance, IpKind kind = IpKind::kFloating) {
    ASSERT_TRUE(Begin(true, ip, instance, Uuid::Random(), kind));
    ASSERT_EQ(Complete(ip, AttachState::kAttaching, AttachState::kAttached).value(), 1);
  }
  ExternalIp Get(const Uuid& ip) {
    return ds_->Read<ExternalIp>([&](Tx& tx) { return ExternalIpGetIn(tx, ip); }).value();
  }
  std::optional<Uuid> OpSaga(const Uuid& ip) {
    return ds_
        ->Read<std::optional<Uuid>>([&](Tx& tx) -> Result<std::optional<Uuid>> {
          auto row =
              FP_TRY(tx.QueryRow("SELECT op_saga_id FROM external_ip WHERE id = ?", ip)).value();
          return OptUuidColumn(row, 0);
        })
        .value();
  }
  static void ExpectError(const Result<AttachStep>& r, ErrorKind kind, const std::string& message) {
    ASSERT_FALSE(r) << "expected: " << message;
    EXPECT_EQ(r.error().kind(), kind) << r.error().message();
    EXPECT_EQ(r.error().message(), message);
  }

  TempDatastore ds_;
  testing::Fixture f_;
};

TEST_F(AttachTest, AttachAndDetachWalkTheStatesAndARerunChangesNothing) {
  Uuid a = NewInstance("a");
  Uuid b = NewInstance("b");
  Uuid ip = NewFip("web");
  Uuid s1 = Uuid::Random();

  auto begun = Begin(true, ip, a, s1);
  ASSERT_TRUE(begun) << begun.error().message();
  EXPECT_TRUE(begun->do_saga);
  EXPECT_EQ(begun->ip.state, AttachState::kAttaching);
  EXPECT_EQ(begun->ip.parent_id, a);
  EXPECT_FALSE(begun->sled) << "a stopped instance has no sled";
  EXPECT_EQ(Get(ip).state, AttachState::kAttaching);
  EXPECT_EQ(OpSaga(ip), s1);

  auto again = Begin(true, ip, a, s1);  // the same saga's action, run again after a crash
  ASSERT_TRUE(again) << again.error().message();
  EXPECT_TRUE(again->do_saga);
  EXPECT_EQ(again->ip.state, AttachState::kAttaching);

  ExpectError(Begin(true, ip, b, Uuid::Random()), ErrorKind::kServiceUnavailable,
              "floating IP \"web\" is being attached to instance \"a\"; retry when that "
              "operation completes");
  ExpectError(Begin(false, ip, a, Uuid::Random()), ErrorKind::kServiceUnavailable,
              "floating IP \"web\" is being attached to instance \"a\"; retry when that "
              "operation completes");

  EXPECT_EQ(Complete(ip, AttachState::kAttaching, AttachState::kAttached).value(), 1);
  EXPECT_EQ(Complete(ip, AttachState::kAttaching, AttachState::kAttached).value(), 0);
  EXPECT_EQ(Get(ip).state, AttachState::kAttached);
  EXPECT_EQ(OpSaga(ip), std::nullopt);

  auto done = Begin(true, ip, a, Uuid::Random());
  ASSERT_TRUE(done) << done.error().message();
  EXPECT_FALSE(done->do_saga) << "attached there already";
  ExpectError(Begin(true, ip, b, Uuid::Random()), ErrorKind::kInvalidRequest,
              "floating IP cannot be attached to one instance while still attached to another: "
              "floating IP \"web\" is attached to instance \"a\"; detach it first, or attach "
              "with \"allow_reassociation\": true to move it in one step");
  ExpectError(Begin(false, ip, b, Uuid::Random()), ErrorKind::kServiceUnavailable,
              "floating IP \"web\" moved to instance \"a\" while this detach began; retry the "
              "detach");

  Uuid s2 = Uuid::Random();
  auto detaching = Begin(false, ip, a, s2);
  ASSERT_TRUE(detaching) << detaching.error().message();
  EXPECT_TRUE(detaching->do_saga);
  EXPECT_EQ(detaching->ip.state, AttachState::kDetaching);
  EXPECT_EQ(Get(ip).state, AttachState::kDetaching);
  EXPECT_EQ(OpSaga(ip), s2);
  EXPECT_TRUE(Begin(false, ip, a, s2).value().do_saga) << "the same saga, run again";
  ExpectError(Begin(true, ip, b, Uuid::Random()), ErrorKind::kServiceUnavailable,
              "floating IP \"web\" is being detached from instance \"a\"; retry when that "
              "operation completes");

  EXPECT_EQ(Complete(ip, AttachState::kDetaching, AttachState::kDetached).value(), 1);
  ExternalIp after = Get(ip);
  EXPECT_EQ(after.state, AttachState::kDetached);
  EXPECT_EQ(after.parent_id, std::nullopt);
  EXPECT_EQ(OpSaga(ip), std::nullopt);
  EXPECT_FALSE(Begin(false, ip, a, Uuid::Random()).value().do_saga) << "detached already";
}

// allow_move: an attach takes a floating IP from the instance that holds it, remembering
// where it came from (a re-run of the step and the undo need it); the undo gives it back, or
// leaves it detached when that instance can no longer take it.
TEST_F(AttachTest, AMoveTakesTheIpFromItsHolderAndItsUndoGivesItBack) {
  Uuid a = NewInstance("a");
  Uuid b = NewInstance("b");
  Uuid ip = NewFip("web");
  Attach(ip, a);
  auto move = [&](const Uuid& to, const Uuid& saga) {
    AttachRequest r{ip, IpKind::kFloating, to, saga};
    r.allow_move = true;
    return ds_->Write<AttachStep>([&](Tx& tx) { return BeginAttachIn(tx, r); });
  };
  Uuid s1 = Uuid::Random();
  auto begun = move(b, s1);
  ASSERT_TRUE(begun) << begun.error().message();
  EXPECT_TRUE(begun->do_saga);
  EXPECT_EQ(begun->from_instance, a);
  EXPECT_EQ(Get(ip).parent_id, b);
  EXPECT_EQ(Get(ip).state, AttachState::kAttaching);
  auto again = move(b, s1);  // the same saga's step, run again
  ASSERT_TRUE(again) << again.error().message();
  EXPECT_EQ(again->from_instance, a) << "a re-run still knows where the IP came from";
  ExpectError(move(a, Uuid::Random()), ErrorKind::kServiceUnavailable,
              "floating IP \"web\" is being attached to instance \"b\"; retry when that "
              "operation completes");

  auto undone = ds_->Write<MoveBack>([&](Tx& tx) { return UndoMoveIn(tx, ip, s1, a); });
  ASSERT_TRUE(undone) << undone.error().message();
  EXPECT_TRUE(undone->held);
  EXPECT_EQ(undone->instance, a);
  EXPECT_FALSE(undone->sled) << "a is stopped";
  EXPECT_EQ(Get(ip).parent_id, a);
  EXPECT_EQ(Get(ip).state, AttachState::kAttached);
  auto twice = ds_->Write<MoveBack>([&](Tx& tx) { return UndoMoveIn(tx, ip, s1, a); });
  EXPECT_FALSE(twice.value().held) << "undone already: changes nothing";
  EXPECT_EQ(Get(ip).parent_id, a);

  // The holder deleted while the move runs: the undo leaves the IP detached.
  Uuid s2 = Uuid::Random();
  ASSERT_TRUE(move(b, s2));
  Sql("UPDATE instance SET time_deleted = 1 WHERE name = 'a'");
  auto orphaned = ds_->Write<MoveBack>([&](Tx& tx) { return UndoMoveIn(tx, ip, s2, a); });
  ASSERT_TRUE(orphaned) << orphaned.error().message();
  EXPECT_TRUE(orphaned->held);
  EXPECT_FALSE(orphaned->instance);
  EXPECT_EQ(Get(ip).state, AttachState::kDetached);
  EXPECT_EQ(Get(ip).parent_id, std::nullopt);

  // A failover from a failed instance that fails gives the IP back to it: it held it, and a
  // failed instance may hold addresses (it runs nowhere: no sled, no NAT row).
  Uuid c = NewInstance("c");
  Attach(ip, b);
  Sql("UPDATE instance SET state = 'failed' WHERE name = 'b'");
  Uuid s3 = Uuid::Random();
  auto failover = move(c, s3);
  ASSERT_TRUE(failover) << failover.error().message();
  EXPECT_EQ(failover->from_instance, b);
  auto returned = ds_->Write<MoveBack>([&](Tx& tx) { return UndoMoveIn(tx, ip, s3, b); });
  ASSERT_TRUE(returned) << returned.error().message();
  EXPECT_EQ(returned->instance, b);
  EXPECT_FALSE(returned->sled);
  EXPECT_EQ(Get(ip).parent_id, b);
  EXPECT_EQ(Get(ip).state, AttachState::kAttached);
  // Run again after a crash past its commit: not held, but it says where the IP is, so that
  // the caller puts the ports right again.
  auto rerun = ds_->Write<MoveBack>([&](Tx& tx) { return UndoMoveIn(tx, ip, s3, b); });
  ASSERT_TRUE(rerun) << rerun.error().message();
  EXPECT_FALSE(rerun->held);
  EXPECT_EQ(rerun->instance, b);
}

// On SQLite a begin reads what it decides on statement by statement: the instance's live
// addresses once (how many it has and its other ephemeral come from the one list), the IP's
// holder's name not again when the holder is the instance it read already (a detach), and the
// primary NIC once with the NAT row made from it.
TEST_F(AttachTest, OnSqliteABeginReadsTheInstancesAddressesOnceItsOwnNameNotTwiceAndItsNicOnce) {
  testing::StatementTrace trace;
  TempDatastore traced{std::make_shared<SystemClock>(), {}, testing::TestEngine::kSqlite};
  const testing::Fixture fx = MakeFixture(*traced, "10.0.1.0", "10.0.1.63");
  ASSERT_TRUE(Link(*traced, fx.pool.id, NameOrId(fx.silo.id), true));
  const Uuid vm = NewInstanceIn(*traced, fx, "vm");
  const Uuid ip = CreateFip(*traced, fx, "fip").value().id;
  auto begin = [&](bool attach) {
    const AttachRequest r{ip, IpKind::kFloating, vm, Uuid::Random(), false};
    return traced->Write<AttachStep>(
        [&](Tx& tx) { return attach ? BeginAttachIn(tx, r) : BeginDetachIn(tx, r); });
  };
  const auto by_parent = [&] {
    return trace.Runs("FROM external_ip WHERE parent_id = ?") +
           trace.Runs("FROM external_ip e WHERE e.parent_id = ?");
  };
  const int listed = by_parent();
  ASSERT_TRUE(begin(true));
  EXPECT_EQ(by_parent() - listed, 1);
  ASSERT_EQ(traced
                ->Write<int64_t>([&](Tx& tx) {
                  return CompleteOpIn(tx, ip, AttachState::kAttaching, AttachState::kAttached);
                })
                .value(),
            1);
  const int names = trace.Runs("SELECT name FROM instance WHERE id = ?");
  ASSERT_TRUE(begin(false));
  EXPECT_EQ(trace.Runs("SELECT name FROM instance WHERE id = ?"), names);

  // An attach about to begin reads the instance's primary NIC once: the IP's NAT row, made in
  // the same transaction, comes from the NIC the begin read (AttachStep::nic).
  ASSERT_EQ(traced
                ->Write<int64_t>([&](Tx& tx) {
                  return CompleteOpIn(tx, ip, AttachState::kDetaching, AttachState::kDetached);
                })
                .value(),
            1);
  Sled sled;
  sled.underlay_address = IpAddr::Parse("fd00:1122:3344:101::1").value();
  const int nics = trace.Runs("FROM network_interface n JOIN vpc v");
  auto rows = traced->Write<std::vector<NatEntry>>([&](Tx& tx) -> Result<std::vector<NatEntry>> {
    const AttachRequest r{ip, IpKind::kFloating, vm, Uuid::Random(), false};
    AttachStep step = FP_TRY(BeginAttachIn(tx, r));
    if (!step.nic) return Fail(Error::Internal("the begin read no NIC"));
    return NatEnsureForIpIn(tx, step.ip, vm, sled, &*step.nic);
  });
  ASSERT_TRUE(rows) << rows.error().message();
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ(trace.Runs("FROM network_interface n JOIN vpc v") - nics, 1);
  auto nic = PrimaryNic(*traced, vm);
  ASSERT_TRUE(nic && *nic);
  EXPECT_EQ(rows->front().mac, (*nic)->mac);
  EXPECT_EQ(rows->front().vni, (*nic)->vni);
  // Another instance's NIC is refused, not used.
  const Uuid other = NewInstanceIn(*traced, fx, "other");
  auto wrong = traced->Write<std::vector<NatEntry>>([&](Tx& tx) -> Result<std::vector<NatEntry>> {
    return NatEnsureForIpIn(tx, FP_TRY(ExternalIpGetIn(tx, ip)), other, sled, &**nic);
  });
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().kind(), ErrorKind::kInternal);
}

// A completion gives back the IP as its transaction leaves it (on SQLite from the row it read
// before its update, not a read after it): the same as a read once it committed, for an
// attach, a detach, a completion that finds the IP no longer in the state it completes, and an
// ephemeral address's release.
TEST_F(AttachTest, ACompletionGivesBackTheIpAsItsCommitLeftIt) {
  const Uuid vm = NewInstance("vm");
  auto complete = [&](const Uuid& ip, AttachState expected, AttachState target) {
    return ds_->Write<ExternalIp>(
        [&](Tx& tx) { return CompleteOpAndGetIn(tx, ip, expected, target); });
  };
  // Each completion below, then what a read after its commit finds.
  auto expect_as_read = [&](const Uuid& ip, AttachState expected, AttachState target) {
    auto out = complete(ip, expected, target);
    ASSERT_TRUE(out) << out.error().message();
    EXPECT_EQ(*out, Get(ip));
  };
  const Uuid fip = NewFip("fip");
  ASSERT_TRUE(Begin(true, fip, vm, Uuid::Random()));
  expect_as_read(fip, AttachState::kAttaching, AttachState::kAttached);
  EXPECT_EQ(Get(fip).state, AttachState::kAttached);
  expect_as_read(fip, AttachState::kAttaching, AttachState::kAttached);  // no longer attaching
  ASSERT_TRUE(Begin(false, fip, vm, Uuid::Random()));
  expect_as_read(fip, AttachState::kDetaching, AttachState::kAttached);  // a detach undone
  EXPECT_EQ(Get(fip).parent_id, vm);
  ASSERT_TRUE(Begin(false, fip, vm, Uuid::Random()));
  expect_as_read(fip, AttachState::kDetaching, AttachState::kDetached);
  EXPECT_EQ(Get(fip).parent_id, std::nullopt);
  ASSERT_TRUE(Begin(true, fip, vm, Uuid::Random()));
  expect_as_read(fip, AttachState::kAttaching, AttachState::kDetached);  // an attach undone
  EXPECT_EQ(Get(fip).state, AttachState::kDetached);

  const Uuid eph = NewEphemeral(vm);
  Attach(eph, vm, IpKind::kEphemeral);
  ASSERT_TRUE(Begin(false, eph, vm, Uuid::Random(), IpKind::kEphemeral));
  expect_as_read(eph, AttachState::kDetaching, AttachState::kDetached);  // released
  expect_as_read(eph, AttachState::kDetaching, AttachState::kDetached);  // again: a deleted row
}

TEST_F(AttachTest, AnUndoneAttachGoesBackToDetachedAndAnUndoneDetachToAttached) {
  Uuid a = NewInstance("a");
  Uuid ip = NewFip("web");
  ASSERT_TRUE(Begin(true, ip, a, Uuid::Random()));
  EXPECT_EQ(Complete(ip, AttachState::kAttaching, AttachState::kDetached).value(), 1);
  EXPECT_EQ(Get(ip).state, AttachState::kDetached);
  EXPECT_EQ(Get(ip).parent_id, std::nullopt);

  Attach(ip, a);
  ASSERT_TRUE(Begin(false, ip, a, Uuid::Random()));
  EXPECT_EQ(Complete(ip, AttachState::kDetaching, AttachState::kAttached).value(), 1);
  EXPECT_EQ(Get(ip).state, AttachState::kAttached);
  EXPECT_EQ(Get(ip).parent_id, a);
  EXPECT_EQ(OpSaga(ip), std::nullopt);
}

TEST_F(AttachTest, MissingInstancesAndAddressesAreNotFound) {
  Uuid a = NewInstance("a");
  Uuid ip = NewFip("web");
  Uuid nobody = Uuid::Random();
  ExpectError(Begin(true, ip, nobody, Uuid::Random()), ErrorKind::kNotFound,
              "not found: instance with id \"" + nobody.ToString() + "\"");
  ExpectError(Begin(true, nobody, a, Uuid::Random()), ErrorKind::kNotFound,
              "not found: floating-ip with id \"" + nobody.ToString() + "\"");
  ExpectError(Begin(false, nobody, a, Uuid::Random(), IpKind::kEphemeral),
              ErrorKind::kInvalidRequest, "instance does not have an ephemeral IP attached");
  ExpectError(Begin(true, ip, a, Uuid::Random(), IpKind::kEphemeral), ErrorKind::kInternal,
              "call-scoped ephemeral IP was lost");
}

TEST_F(AttachTest, AFloatingIpMovedToAnotherProjectBeforeTheAttachBeganIsNotTaken) {
  // The request checked the projects, then the IP moved (a transfer committed in between):
  // the step that takes the IP checks again.
  Uuid a = NewInstance("a");
  Uuid ip = NewFip("web");
  Project other = ProjectCreate(*ds_, Uuid::Random(), f_.silo.id, "p2", "").value();
  ASSERT_TRUE(FloatingIpTransfer(*ds_, ip, other.id));
  ExpectError(Begin(true, ip, a, Uuid::Random()), ErrorKind::kInvalidRequest,
              "floating IP must be in the same project as the instance");
  EXPECT_EQ(Get(ip).state, AttachState::kDetached);
  EXPECT_FALSE(Get(ip).parent_id);
}

TEST_F(AttachTest, TheInstanceMustBeStoppedOrRunningAndNotMigrating) {
  Uuid a = NewInstance("a");
  Uuid ip = NewFip("web");
  Sled sled = SledUpsert(*ds_, "sled-1", "http://127.0.0.1:1", Ip("fd00::1")).value();

  Sql("UPDATE instance SET state = 'vmm', run_state = 'starting', sled_id = '" +
      sled.id.ToString() + "' WHERE id = '" + a.ToString() + "'");
  ExpectError(Begin(true, ip, a, Uuid::Random()), ErrorKind::kServiceUnavailable,
              "instance \"a\" is starting; retry the attach of floating IP \"web\" when it is "
              "running or stopped");
  Sql("UPDATE instance SET migration_id = '" + Uuid::Random().ToString() +
      "', run_state = 'running' WHERE id = '" + a.ToString() + "'");
  ExpectError(Begin(true, ip, a, Uuid::Random()), ErrorKind::kServiceUnavailable,
              "instance \"a\" is migrating; retry the attach of floating IP \"web\" when the "
              "migration completes");
  Sql("UPDATE instance SET migration_id = NULL WHERE id = '" + a.ToString() + "'");
  auto running = Begin(true, ip, a, Uuid::Random());
  ASSERT_TRUE(running) << running.error().message();
  ASSERT_TRUE(running->sled) << "a running instance's sled comes with the step";
  EXPECT_EQ(running->sled->id, sled.id);
  EXPECT_EQ(running->sled->agent_url, "http://127.0.0.1:1");
  ASSERT_EQ(Complete(ip, AttachState::kAttaching, AttachState::kAttached).value(), 1);

  // A failed instance is no dead end (issue 23): its addresses detach (it runs nowhere: no
  // sled comes with the step), but nothing new attaches to it.
  Sql("UPDATE instance SET state = 'failed', sled_id = NULL WHERE id = '" + a.ToString() + "'");
  Uuid other = NewFip("other");
  ExpectError(Begin(true, other, a, Uuid::Random()), ErrorKind::kInvalidRequest,
              "cannot attach floating IP to instance in failed state");
  auto detaching = Begin(false, ip, a, Uuid::Random());
  ASSERT_TRUE(detaching) << detaching.error().message();
  EXPECT_FALSE(detaching->sled);
  ASSERT_EQ(Complete(ip, AttachState::kDetaching, AttachState::kDetached).value(), 1);

  Sql("UPDATE instance SET state = 'creating' WHERE id = '" + a.ToString() + "'");
  ExpectError(Begin(true, other, a, Uuid::Random()), ErrorKind::kInvalidRequest,
              "cannot attach floating IP to instance in creating state");
  auto creating = Begin(true, other, a, Uuid::Random(), IpKind::kFloating, /*creating=*/true);
  ASSERT_TRUE(creating) << creating.error().message();
  EXPECT_EQ(creating->ip.state, AttachState::kAttaching);
}

TEST_F(AttachTest, AnInstanceHoldsAtMost32AddressesOfItsNicsVersionsAndOneEphemeralPerVersion) {
  Uuid a = NewInstance("a");
  for (int n = 0; n < 32; ++n) Attach(NewFip(fmt::format("f{}", n)), a);
  Uuid extra = NewFip("extra");
  ExpectError(Begin(true, extra, a, Uuid::Random()), ErrorKind::kInvalidRequest,
              "an instance may not have more than 32 external IP addresses");
  EXPECT_EQ(Get(extra).state, AttachState::kDetached);

  Uuid b = NewInstance("b");
  auto v6 = MakeFixture(*ds_, "fd00::10", "fd00::1f", "pool6", IpVersion::kV6);
  ASSERT_TRUE(Link(*ds_, v6.pool.id, NameOrId(f_.silo.id), false));
  Uuid ip6 = CreateFip(*ds_, v6, "six", FromPool("pool6")).value().id;
  ExpectError(Begin(true, ip6, b, Uuid::Random()), ErrorKind::kInvalidRequest,
              "The floating external IP is an IPv6 address, but the instance with ID " +
                  b.ToString() +
                  " does not have a primary network interface with a VPC-private IPv6 address. "
                  "Add a VPC-private IPv6 address to the interface, or attach a different IP "
                  "address");
  Uuid dual = NewInstance("dual", NicKind::kDualStack);
  Attach(ip6, dual);

  Uuid e1 = NewEphemeral(b);
  Attach(e1, b, IpKind::kEphemeral);
  Uuid e2 = NewEphemeral(b);
  ExpectError(
      Begin(true, e2, b, Uuid::Random(), IpKind::kEphemeral), ErrorKind::kInvalidRequest,
      "instance \"b\" already has an ephemeral IPv4 address (" + Get(e1).ip.ToString() + ")");
}

TEST_F(AttachTest, ADetachedEphemeralAddressGoesBackToItsPool) {
  Uuid a = NewInstance("a");
  Uuid e = NewEphemeral(a);
  IpAddr address = Get(e).ip;
  Attach(e, a, IpKind::kEphemeral);
  Uuid s = Uuid::Random();
  ASSERT_TRUE(Begin(false, e, a, s, IpKind::kEphemeral));
  EXPECT_EQ(Complete(e, AttachState::kDetaching, AttachState::kDetached).value(), 1);
  EXPECT_EQ(Complete(e, AttachState::kDetaching, AttachState::kDetached).value(), 0);
  // Released: gone from the instance, its saga still recorded (IpHeldBySagaIn reads it), and
  // the address is the lowest free one again.
  EXPECT_FALSE(ds_->Read<bool>([&](Tx& tx) { return IpHeldBySagaIn(tx, e, s); }).value());
  EXPECT_EQ(OpSaga(e), s);
  EXPECT_EQ(Get(CreateFip(*ds_, f_, "again").value().id).ip, address);
}

TEST_F(AttachTest, CompletingAnAttachWhoseInstanceWasDeletedUnderneathIsNotFound) {
  Uuid a = NewInstance("a");
  Uuid ip = NewFip("web");
  ASSERT_TRUE(Begin(true, ip, a, Uuid::Random()));
  // The instance's delete detaches every IP it holds, whatever their state.
  ASSERT_TRUE(ds_->Write([&](Tx& tx) { return ReleaseFloatingFromInstanceIn(tx, ip, a); }));
  auto completed = Complete(ip, AttachState::kAttaching, AttachState::kAttached);
  ASSERT_FALSE(completed);
  EXPECT_EQ(completed.error().kind(), ErrorKind::kNotFound);
  EXPECT_EQ(completed.error().message(),
            "not found: instance (it was deleted while the external IP was being attached to "
            "it)");
}

// The point of the one-statement forms: each step is one exchange with PostgreSQL. Measured
// inside one transaction, on its connection, after a first run of each statement there (the
// first run on a connection also prepares it: one more exchange).
TEST_F(AttachTest, OnPostgresEachStepIsOneRoundTrip) {
  if (!ds_.postgres()) GTEST_SKIP() << "SQLite runs in the process: no round trips to count";
  Uuid a = NewInstance("a");
  Uuid warm = NewFip("warm");
  Uuid ip = NewFip("web");
  auto begin = [&](bool attach, const Uuid& id) {
    return [=](Tx& tx) -> Status {
      AttachRequest r{id, IpKind::kFloating, a, Uuid::Random(), false};
      FP_TRY(attach ? BeginAttachIn(tx, r) : BeginDetachIn(tx, r));
      return Ok();
    };
  };
  auto complete = [&](const Uuid& id, AttachState expected, AttachState target) {
    return [=](Tx& tx) -> Status {
      FP_TRY(CompleteOpIn(tx, id, expected, target));
      return Ok();
    };
  };
  // Each pair in one transaction: the warm-up on `warm`, then the measured step on `ip`.
  int64_t n = -1;
  auto measured = [&](std::function<Status(Tx&)> warmup, std::function<Status(Tx&)> step) {
    return [&, warmup, step](Tx& tx) -> Status {
      FP_CHECK_OK(warmup(tx));
      int64_t before = ds_->round_trips();
      FP_CHECK_OK(step(tx));
      n = ds_->round_trips() - before;
      return Ok();
    };
  };
  ASSERT_TRUE(ds_->Write(measured(begin(true, warm), begin(true, ip))));
  EXPECT_EQ(n, 1) << "begin attach";
  ASSERT_TRUE(ds_->Write(measured(complete(warm, AttachState::kAttaching, AttachState::kAttached),
                                  complete(ip, AttachState::kAttaching, AttachState::kAttached))));
  EXPECT_EQ(n, 1) << "complete attach";
  ASSERT_TRUE(ds_->Write(measured(begin(false, warm), begin(false, ip))));
  EXPECT_EQ(n, 1) << "begin detach";
  ASSERT_TRUE(ds_->Write(measured(complete(warm, AttachState::kDetaching, AttachState::kDetached),
                                  complete(ip, AttachState::kDetaching, AttachState::kDetached))));
  EXPECT_EQ(n, 1) << "complete detach";

  // An ephemeral IP's detach also returns its address to the pool, in the same statement.
  Uuid e = NewEphemeral(a);
  Attach(e, a, IpKind::kEphemeral);
  ASSERT_TRUE(Begin(false, e, a, Uuid::Random(), IpKind::kEphemeral));
  ASSERT_TRUE(ds_->Write(measured(complete(warm, AttachState::kDetaching, AttachState::kDetached),
                                  complete(e, AttachState::kDetaching, AttachState::kDetached))));
  EXPECT_EQ(n, 1) << "complete an ephemeral detach";
  EXPECT_EQ(Get(CreateFip(*ds_, f_, "again").value().id).ip, Get(e).ip) << "released";
}

// The reads an attach, a detach and the sled watcher's judgement of a port report make, each
// a transaction of one statement: on PostgreSQL that statement carries the COMMIT
// (Tx::QueryLast), one round trip each. Their answers are the same on both engines.
TEST_F(AttachTest, TheReadsAroundAnAttachAreOneRoundTripEachOnPostgres) {
  Uuid a = NewInstance("a");
  Uuid lone = NewInstance("lone");
  Uuid fip = NewFip("web");
  Attach(fip, a);
  Uuid e = NewEphemeral(a);
  Attach(e, a, IpKind::kEphemeral);
  auto trips = [&](const std::function<void()>& read) {
    const int64_t before = ds_->round_trips();
    read();
    return ds_->round_trips() - before;
  };
  const int64_t one = ds_.postgres() ? 1 : 0;

  EXPECT_EQ(trips([&] {
              auto both = ds_->Read<AttachTargets>(
                  [&](Tx& tx) { return FloatingIpAndInstanceByIdIn(tx, f_.silo.id, fip, a); });
              ASSERT_TRUE(both) << both.error().message();
              EXPECT_EQ(both->ip.id, fip);
              ASSERT_TRUE(both->instance);
              EXPECT_EQ(both->instance->id, a);
            }),
            one);
  EXPECT_EQ(trips([&] {
              auto ip = FloatingIpLookupById(*ds_, f_.silo.id, fip);
              ASSERT_TRUE(ip) << ip.error().message();
              EXPECT_EQ(ip->name, "web");
            }),
            one);
  EXPECT_EQ(trips([&] {
              auto ip = FloatingIpLookupByName(*ds_, f_.project.id, "web");
              ASSERT_TRUE(ip) << ip.error().message();
              EXPECT_EQ(ip->id, fip);
            }),
            one);
  EXPECT_EQ(trips([&] { ASSERT_TRUE(NatChangesSince(*ds_, 0, 10)); }), one);

  // The instance beside each of its addresses, in InstanceExternalIps' order; none; missing.
  auto expected = InstanceExternalIps(*ds_, a);
  ASSERT_TRUE(expected);
  ASSERT_EQ(expected->size(), 2u);
  EXPECT_EQ(trips([&] {
              auto both = InstanceAnyStateWithIps(*ds_, a);
              ASSERT_TRUE(both) << both.error().message();
              EXPECT_EQ(both->instance.id, a);
              EXPECT_EQ(both->instance.name, "a");
              ASSERT_EQ(both->ips.size(), 2u);
              for (size_t i = 0; i < 2; ++i) {
                EXPECT_EQ(both->ips[i].id, (*expected)[i].id);
                EXPECT_EQ(both->ips[i].ip, (*expected)[i].ip);
                EXPECT_EQ(both->ips[i].state, AttachState::kAttached);
              }
            }),
            one);
  auto alone = InstanceAnyStateWithIps(*ds_, lone);
  ASSERT_TRUE(alone) << alone.error().message();
  EXPECT_EQ(alone->instance.id, lone);
  EXPECT_TRUE(alone->ips.empty());
  auto missing = InstanceAnyStateWithIps(*ds_, Uuid::Random());
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().kind(), ErrorKind::kNotFound);
}

// Deleting a stopped instance gives back what it held in the same transaction: its floating
// IP stays the project's, detached and free to attach elsewhere; its ephemeral IP is released,
// its address back in the pool. (Caught only by the end-to-end suite before: a delete that
// left the floating IP attached passed every C++ test.)
TEST_F(AttachTest, DeletingAnInstanceDetachesItsFloatingIpAndReleasesItsEphemeralIp) {
  const Uuid doomed = NewInstance("doomed");
  const Uuid other = NewInstance("other");
  const Uuid fip = NewFip("web");
  ASSERT_NO_FATAL_FAILURE(Attach(fip, doomed));
  const Uuid eph = NewEphemeral(doomed);
  ASSERT_NO_FATAL_FAILURE(Attach(eph, doomed, IpKind::kEphemeral));
  const IpAddr eph_address = Get(eph).ip;

  ASSERT_TRUE(ds_->Write([&](Tx& tx) { return InstanceDeleteIn(tx, doomed); }));

  ExternalIp floating = Get(fip);
  EXPECT_EQ(floating.state, AttachState::kDetached);
  EXPECT_EQ(floating.parent_id, std::nullopt);
  EXPECT_EQ(floating.project_id, f_.project.id) << "the floating IP stays the project's";
  auto live = ds_->Read<bool>([&](Tx& tx) -> Result<bool> {
    auto row = FP_TRY(tx.QueryRow("SELECT time_deleted FROM external_ip WHERE id = ?", eph));
    return row && row->IsNull(0);
  });
  ASSERT_TRUE(live) << live.error().message();
  EXPECT_FALSE(*live) << "the ephemeral IP outlived its instance";
  // Both can be used again: the floating IP attaches to another instance, and the ephemeral
  // IP's address is the lowest free one again.
  ASSERT_NO_FATAL_FAILURE(Attach(fip, other));
  EXPECT_EQ(Get(NewEphemeral(other)).ip, eph_address);
}

// Reads row `id` of `from` (e.g. "external_ip e") through `decode` with one of `columns`
// replaced by the literal `text`, and expects an Internal error that names the text: stored text
// that is none of an enum's is corruption, and reading it says so (it once read as a floating
// IP, or as detached, and carried on).
template <typename T>
void ExpectCorruptTextIsInternal(Datastore& ds, std::string_view columns, std::string_view from,
                                 const Uuid& id, const std::string& column, const std::string& text,
                                 Result<T> (*decode)(const Row&)) {
  std::string replaced(columns);
  replaced.replace(replaced.find(column + ","), column.size(), "'" + text + "'");
  auto read = ds.Read<T>([&](Tx& tx) -> Result<T> {
    auto row = FP_TRY(tx.QueryRow(fmt::format("SELECT {} FROM {} WHERE {}.id = ?", replaced, from,
                                              from.substr(from.find(' ') + 1)),
                                  id));
    if (!row) return Fail(Error::Internal("no row"));
    return decode(*row);
  });
  ASSERT_FALSE(read) << column;
  EXPECT_EQ(read.error().kind(), ErrorKind::kInternal) << column;
  EXPECT_NE(read.error().message().find("\"" + text + "\""), std::string::npos)
      << read.error().message();
}

TEST_F(AttachTest, AStoredKindOrStateThatIsNoneOfTheEnumsIsAnInternalError) {
  const Uuid fip = NewFip("web");
  for (const auto& [column, text] :
       {std::pair<std::string, std::string>{"e.kind", "floaty"}, {"e.state", "parked"}}) {
    ExpectCorruptTextIsInternal<ExternalIp>(*ds_, kExternalIpColumns, "external_ip e", fip, column,
                                            text, ExternalIpFromRow);
  }
}

TEST_F(AttachTest, AStoredInstanceStateOrRunStateThatIsNoneOfTheEnumsIsAnInternalError) {
  const Uuid vm = NewInstance("vm");
  for (const auto& [column, text] :
       {std::pair<std::string, std::string>{"i.state", "zombie"}, {"i.run_state", "napping"}}) {
    ExpectCorruptTextIsInternal<Instance>(*ds_, kInstanceColumns, "instance i", vm, column, text,
                                          InstanceFromRow);
  }
}

}  // namespace
}  // namespace fp::db
