// The NAT changes and the completing step that an attach or detach saga makes without reading
// their result: on PostgreSQL they are held back to go with the transaction's next statement or
// its COMMIT (Tx::ExecLater), or made in one statement, so this checks, on whichever engine the
// tests run on, that they change the tables exactly as the statement-by-statement path does,
// and on PostgreSQL that they cost no round trip of their own (CompleteOpAndGetIn one).

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "common/testing/wait_for.h"
#include "db/attach.h"
#include "db/external_ips.h"
#include "db/instances.h"
#include "db/ip_pools.h"
#include "db/nat.h"
#include "db/postgres/connection.h"
#include "db/request_effect.h"
#include "db/sleds.h"
#include "db/testing/temp_datastore.h"

namespace fp::db {
namespace {

using testing::CreateFip;
using testing::MakeFixture;
using testing::TempDatastore;

class HeldBackChangesTest : public ::testing::Test {
 protected:
  HeldBackChangesTest() : f_(MakeFixture(*ds_, "10.0.0.0", "10.0.0.63")) {
    EXPECT_TRUE(Link(*ds_, f_.pool.id, NameOrId(f_.silo.id), true));
    for (int s = 0; s < 2; ++s) {
      sleds_.push_back(SledUpsert(*ds_, "sled-" + std::to_string(s), "http://127.0.0.1:1",
                                  *IpAddr::Parse("fd00::" + std::to_string(s + 1)))
                           .value());
    }
    InstanceCreate c;
    c.id = Uuid::Random();
    c.nic_id = Uuid::Random();
    c.project_id = f_.project.id;
    c.name = "vm";
    c.hostname = "vm";
    c.memory = int64_t{1} << 30;
    c.nic = NicKind::kIpv4;
    EXPECT_TRUE(ds_->Write([&](Tx& tx) -> Status {
      FP_TRY(InstanceCreateRecordIn(tx, c));
      return InstanceFinishCreateIn(tx, c.id);
    }));
    instance_ = c.id;
    ip_ = CreateFip(*ds_, f_, "web").value();
  }

  // Attaches `ip` to the (stopped) instance, as an attach saga's two steps do.
  void Attach(const ExternalIp& ip) {
    AttachRequest r{ip.id, IpKind::kFloating, instance_, Uuid::Random(), false};
    ASSERT_TRUE(ds_->Write<AttachStep>([&](Tx& tx) { return BeginAttachIn(tx, r); }));
    ASSERT_TRUE(ds_->Write<ExternalIp>([&](Tx& tx) {
      return CompleteOpAndGetIn(tx, ip.id, AttachState::kAttaching, AttachState::kAttached);
    }));
  }
  // Two floating IPs attached, the instance running on sled 0, and its NAT rows written.
  void AttachTwoAndRun() {
    Attach(ip_);
    Attach(CreateFip(*ds_, f_, "db").value());
    ASSERT_TRUE(ds_->Write([&](Tx& tx) -> Status {
      FP_TRY(InstanceBeginStartIn(tx, instance_, sleds_[0].id, Uuid::Random()));
      FP_TRY(tx.Exec("UPDATE instance SET run_state = 'running' WHERE id = ?", instance_));
      EXPECT_EQ(FP_TRY(NatEnsureForInstanceIn(tx, instance_, sleds_[0])), 2u);
      return Ok();
    }));
    ASSERT_EQ(NatLive(*ds_).value().size(), 2u);
  }

  // PostgreSQL: with another transaction holding a row (`hold`, a statement run in it), `op`
  // (which writes that row and removes the instance's NAT rows) waits for it without holding
  // the NAT versions' turn; once the row is let go, `op` ends and the rows are removed.
  void ExpectNoTurnHeldWhileWaitingForARow(const std::string& hold,
                                           const std::vector<SqlValue>& params,
                                           const std::function<Status()>& op) {
    AttachTwoAndRun();
    auto holder = std::move(postgres::PgConnection::Open(ds_.postgres_url()).value());
    ASSERT_TRUE(holder->Run("BEGIN"));
    ASSERT_TRUE(holder->Exec(hold, params));
    std::atomic<bool> done{false};
    Status result = Ok();
    std::thread t([&] {
      result = op();
      done = true;
    });
    auto watcher = std::move(postgres::PgConnection::Open(ds_.postgres_url()).value());
    const bool waits = fp::testing::WaitFor(
        [&] {
          auto n = watcher->Query(
              "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND "
              "datname = current_database()",
              {});
          return done.load() || (n && n->front().Int(0) > 0);
        },
        std::chrono::seconds(20), std::chrono::milliseconds(5));
    EXPECT_TRUE(waits && !done.load()) << "it did not wait for the row";
    // The turn, as another transaction takes it: at once, not after a wait.
    Status turn = watcher->Run(
        "BEGIN; SET LOCAL lock_timeout = '2s'; LOCK TABLE nat_version_turn IN EXCLUSIVE MODE; "
        "COMMIT");
    EXPECT_TRUE(turn) << "it held the NAT turn while it waited: " << turn.error().message();
    if (!turn) {
      EXPECT_TRUE(watcher->Run("ROLLBACK"));
    }
    EXPECT_TRUE(holder->Run("ROLLBACK"));
    t.join();
    ASSERT_TRUE(result) << result.error().message();
    EXPECT_TRUE(NatLive(*ds_).value().empty());
  }

  // Runs `change` in a write; returns the round trips it made itself (none for SQLite).
  int64_t Change(const std::function<Status(Tx&)>& change) {
    int64_t trips = -1;
    Status s = ds_->Write([&](Tx& tx) -> Status {
      int64_t before = ds_->round_trips();
      FP_CHECK_OK(change(tx));
      trips = ds_->round_trips() - before;
      return Ok();
    });
    EXPECT_TRUE(s) << s.error().message();
    return trips;
  }
  // The feed after `version`, as (version, removed, sled) of each change.
  std::vector<std::tuple<int64_t, bool, std::string>> FeedAfter(int64_t version) {
    std::vector<std::tuple<int64_t, bool, std::string>> out;
    const NatFeed feed = NatChangesSince(*ds_, version, 100).value();
    for (const NatFeedChange& c : feed.changes) {
      out.emplace_back(c.version, c.deleted, c.row.sled_address.ToString());
    }
    return out;
  }

  TempDatastore ds_;
  testing::Fixture f_;
  std::vector<Sled> sleds_;
  Uuid instance_;
  ExternalIp ip_;
};

TEST_F(HeldBackChangesTest, EnsureLaterAndRemoveChangeTheNatTableAsTheStepByStepPathDoes) {
  const int64_t v0 = NatCurrentVersion(*ds_).value();
  auto ensure = [&](const Sled& sled) {
    return Change([&](Tx& tx) { return NatEnsureForIpLaterIn(tx, ip_, instance_, sled); });
  };
  auto remove = [&] { return Change([&](Tx& tx) { return NatRemoveForIpIn(tx, ip_); }); };
  // Each held back: sent with the COMMIT, no round trip of its own (none at all on SQLite).
  EXPECT_EQ(ensure(sleds_[0]), 0);
  using FeedItem = std::tuple<int64_t, bool, std::string>;
  EXPECT_EQ(FeedAfter(v0), (std::vector<FeedItem>{{v0 + 1, false, "fd00::1"}}));
  const NatEntry first = NatLive(*ds_).value().at(0);
  EXPECT_EQ(first.instance_id, instance_);
  EXPECT_EQ(first.external_ip, ip_.ip);
  EXPECT_EQ(first.version_added, v0 + 1);

  // The same mapping again: nothing changes, no version is taken.
  EXPECT_EQ(ensure(sleds_[0]), 0);
  EXPECT_EQ(NatCurrentVersion(*ds_).value(), v0 + 1);
  EXPECT_EQ(NatLive(*ds_).value().at(0).id, first.id);

  // To the other sled: the old row removed, then the new one added, each with its version.
  EXPECT_EQ(ensure(sleds_[1]), 0);
  EXPECT_EQ(FeedAfter(v0 + 1),
            (std::vector<FeedItem>{{v0 + 2, true, "fd00::1"}, {v0 + 3, false, "fd00::2"}}));
  ASSERT_EQ(NatLive(*ds_).value().size(), 1u);

  EXPECT_EQ(remove(), 0);
  EXPECT_EQ(FeedAfter(v0 + 3), (std::vector<FeedItem>{{v0 + 4, true, "fd00::2"}}));
  EXPECT_TRUE(NatLive(*ds_).value().empty());
  // Nothing to remove: no version taken.
  EXPECT_EQ(remove(), 0);
  EXPECT_EQ(NatCurrentVersion(*ds_).value(), v0 + 4);

  // And the step-by-step path (what SQLite runs) agrees from here on: it finds what the held
  // back ones wrote.
  ASSERT_TRUE(ds_->Write([&](Tx& tx) -> Status {
    FP_TRY(NatEnsureForIpIn(tx, ip_, instance_, sleds_[1]));
    return Ok();
  }));
  EXPECT_EQ(ensure(sleds_[1]), 0);
  EXPECT_EQ(FeedAfter(v0 + 4), (std::vector<FeedItem>{{v0 + 5, false, "fd00::2"}}));
}

// An instance's forms (start, migration, stop, delete, expunge): every address gets its row and
// loses it, each change at a version of its own; on PostgreSQL the removal is held back.
TEST_F(HeldBackChangesTest, AnInstancesAddressesChangeEachAtAVersionOfItsOwn) {
  const int64_t v0 = NatCurrentVersion(*ds_).value();
  AttachTwoAndRun();
  using FeedItem = std::tuple<int64_t, bool, std::string>;
  EXPECT_EQ(FeedAfter(v0),
            (std::vector<FeedItem>{{v0 + 1, false, "fd00::1"}, {v0 + 2, false, "fd00::1"}}));
  // Again, to the same sled: nothing changes. To the other (a migration's finish): each row
  // removed and added again.
  auto ensure = [&](const Sled& sled) {
    return ds_->Write<size_t>([&](Tx& tx) { return NatEnsureForInstanceIn(tx, instance_, sled); });
  };
  EXPECT_EQ(ensure(sleds_[0]).value(), 2u);
  EXPECT_EQ(NatCurrentVersion(*ds_).value(), v0 + 2);
  EXPECT_EQ(ensure(sleds_[1]).value(), 2u);
  std::vector<FeedItem> moved = FeedAfter(v0 + 2);
  ASSERT_EQ(moved.size(), 4u);
  for (int64_t k = 0; k < 4; ++k) {
    EXPECT_EQ(std::get<0>(moved[k]), v0 + 3 + k);
    EXPECT_EQ(std::get<1>(moved[k]), k % 2 == 0) << k;
    EXPECT_EQ(std::get<2>(moved[k]), k % 2 == 0 ? "fd00::1" : "fd00::2") << k;
  }
  EXPECT_EQ(Change([&](Tx& tx) { return NatRemoveForInstanceIn(tx, instance_); }), 0);
  EXPECT_EQ(FeedAfter(v0 + 6),
            (std::vector<FeedItem>{{v0 + 7, true, "fd00::2"}, {v0 + 8, true, "fd00::2"}}));
  EXPECT_TRUE(NatLive(*ds_).value().empty());
  EXPECT_EQ(Change([&](Tx& tx) { return NatRemoveForInstanceIn(tx, instance_); }), 0);
  EXPECT_EQ(NatCurrentVersion(*ds_).value(), v0 + 8) << "nothing to remove: no version taken";
}

// On PostgreSQL an instance's stop and a sled's expunge take the NAT versions' turn only in
// their last exchange, after every other row they change: waiting for the instance's row (a
// concurrent change holds it), neither holds the turn, so an attach taking the turn meanwhile
// (as one holding a row both want would) goes ahead at once instead of waiting for them
// (ExpectNoTurnHeldWhileWaitingForARow).
TEST_F(HeldBackChangesTest, OnPostgresAStopWaitingForTheInstancesRowDoesNotHoldTheNatTurn) {
  if (!ds_.postgres()) GTEST_SKIP() << "PostgreSQL's lock order (FLOATPLANE_TEST_POSTGRES)";
  ExpectNoTurnHeldWhileWaitingForARow(
      "UPDATE instance SET time_modified = time_modified WHERE id = ?", {instance_.ToString()},
      [&]() -> Status {
        FP_TRY(InstanceRecordRunState(*ds_, instance_, RunState::kStopped, nullptr, nullptr));
        return Ok();
      });
}

// The expunge as the API makes it: a request with an Idempotency-Key, whose key and audit entry
// are written after the body (the key's insert a round trip of its own), here waiting for
// another request's insert of the same key.
TEST_F(HeldBackChangesTest, OnPostgresAnExpungeWaitingForItsRequestsKeyDoesNotHoldTheNatTurn) {
  if (!ds_.postgres()) GTEST_SKIP() << "PostgreSQL's lock order (FLOATPLANE_TEST_POSTGRES)";
  model::AuditEntry entry;
  entry.id = Uuid::TimeOrdered();
  entry.time_started = ds_->clock().Now();
  entry.request_id = "expunge-1";
  entry.request_uri = "/v1/system/hardware/sleds/expunge";
  entry.operation_id = "sled_expunge";
  entry.source_ip = "127.0.0.1";
  entry.actor_silo_id = Uuid::Random();
  entry.actor_user_id = Uuid::Random();
  entry.auth_method = "access_token";
  entry.credential_id = entry.actor_user_id;
  entry.server_id = "server-a";
  const Uuid token = Uuid::Random();
  RequestEffect request(RequestEffect::Key{token, "k", "hash"}, entry);
  const Effect<Sled> effect{&request, [](const Sled&) { return EffectAnswer{200, "{}"}; }};
  ExpectNoTurnHeldWhileWaitingForARow(
      "INSERT INTO idempotency_key (token_id, key, request_sha256, state, status, body, "
      "time_created) VALUES (?, 'k', 'other', 'done', 200, '{}', 0)",
      {token.ToString()}, [&]() -> Status {
        FP_TRY(SledExpunge(*ds_, sleds_[0].id, effect));
        return Ok();
      });
  EXPECT_EQ(request.outcome(), RequestEffect::Outcome::kAnswered);
}

TEST_F(HeldBackChangesTest, CompleteOpAndGetAnswersTheRowAsTheTransactionLeavesIt) {
  IpKind kind = IpKind::kFloating;
  auto begin = [&](bool attach) {
    AttachRequest r{ip_.id, kind, instance_, Uuid::Random(), false};
    return ds_->Write<AttachStep>(
        [&](Tx& tx) { return attach ? BeginAttachIn(tx, r) : BeginDetachIn(tx, r); });
  };
  auto complete = [&](AttachState expected, AttachState target, int64_t& trips) {
    return ds_->Write<ExternalIp>([&](Tx& tx) -> Result<ExternalIp> {
      int64_t before = ds_->round_trips();
      ExternalIp out = FP_TRY(CompleteOpAndGetIn(tx, ip_.id, expected, target));
      trips = ds_->round_trips() - before;
      // What a read in the same transaction finds afterwards.
      ExternalIp read = FP_TRY(ExternalIpGetIn(tx, ip_.id));
      EXPECT_EQ(out.state, read.state);
      EXPECT_EQ(out.parent_id, read.parent_id);
      EXPECT_EQ(out.time_modified, read.time_modified);
      return out;
    });
  };
  const int64_t one = ds_.postgres() ? 1 : 0;
  int64_t trips = -1;
  ASSERT_TRUE(begin(true));
  auto attached = complete(AttachState::kAttaching, AttachState::kAttached, trips);
  ASSERT_TRUE(attached) << attached.error().message();
  EXPECT_EQ(attached->state, AttachState::kAttached);
  EXPECT_EQ(attached->parent_id, instance_);
  EXPECT_EQ(trips, one);
  // Run again (a node re-run after a crash): nothing changes, the row is still the answer.
  auto again = complete(AttachState::kAttaching, AttachState::kAttached, trips);
  ASSERT_TRUE(again) << again.error().message();
  EXPECT_EQ(again->state, AttachState::kAttached);
  EXPECT_EQ(again->time_modified, attached->time_modified);
  EXPECT_EQ(trips, one);
  ASSERT_TRUE(begin(false));
  auto detached = complete(AttachState::kDetaching, AttachState::kDetached, trips);
  ASSERT_TRUE(detached) << detached.error().message();
  EXPECT_EQ(detached->state, AttachState::kDetached);
  EXPECT_FALSE(detached->parent_id);
  EXPECT_EQ(trips, one);

  // An ephemeral IP's detach releases its address in the same statement: the row answered is
  // the released one, and the address can be allocated again.
  PoolSelector selector;
  selector.mode = PoolSelector::Mode::kExplicitPool;
  selector.pool = testing::ByName("pool");
  kind = IpKind::kEphemeral;
  ip_ = ds_->Write<ExternalIp>([&](Tx& tx) {
             return EphemeralAllocateIn(tx, Uuid::Random(), instance_, f_.silo.id, selector);
           })
            .value();
  ASSERT_TRUE(begin(true));
  ASSERT_TRUE(complete(AttachState::kAttaching, AttachState::kAttached, trips));
  ASSERT_TRUE(begin(false));
  auto released = complete(AttachState::kDetaching, AttachState::kDetached, trips);
  ASSERT_TRUE(released) << released.error().message();
  EXPECT_EQ(released->state, AttachState::kDetached);
  EXPECT_EQ(trips, one);
  auto again_allocated = ds_->Write<ExternalIp>([&](Tx& tx) {
    return EphemeralAllocateIn(tx, Uuid::Random(), instance_, f_.silo.id, selector);
  });
  ASSERT_TRUE(again_allocated) << again_allocated.error().message();
  EXPECT_EQ(again_allocated->ip, released->ip) << "the lowest free address: the released one";
}

}  // namespace
}  // namespace fp::db
