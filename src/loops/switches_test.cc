// The NAT reconciler with several switch agents (issue 15): every switch holds every entry, a
// switch that does not answer neither fails Sync nor loses entries, a switch agent that
// restarted empty is noticed by the heartbeat and reloaded, drift is found by digest, garbage
// collection waits for every switch that answers, and switches come and go at runtime.

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agents/daemon/switch_agent.h"
#include "common/testing/manual_clock.h"
#include "common/testing/wait_for.h"
#include "db/counters.h"
#include "db/nat.h"
#include "db/testing/temp_datastore.h"
#include "http/client.h"
#include "loops/nat_reconciler.h"
#include "loops/switch_reconciler.h"
#include "loops/testing/nat_rows.h"

namespace fp::loops {
namespace {

using std::chrono::milliseconds;
using testing::AddNatEntry;

class SwitchesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 2; ++i) {
      sims_.push_back(agents::daemon::SwitchAgentDaemon::Start({}).value());
      nat_.AddSwitch(agents::MakeSwitchAgentClient(sims_.back()->base_url(), 1000));
    }
  }

  agents::NatTable Desired() { return testing::DesiredTable(*ds_); }

  void Control(size_t k, const std::string& method, const std::string& path,
               const std::string& body = {}) {
    http::HttpClient control("switch agent", sims_[k]->base_url(), milliseconds(2000));
    auto answer = control.Call(method, path, body);
    ASSERT_TRUE(answer) << answer.error().message();
    ASSERT_EQ(answer->status, 200) << answer->body;
  }
  // Switch k answers every call 503, as a switch agent that is down.
  void TakeDown(size_t k) {
    Control(k, "POST", "/faults", R"({"endpoint": "*", "fail_next": 1000000})");
  }
  void BringUp(size_t k) { Control(k, "DELETE", "/faults"); }

  // As a crash that lost the commit of NAT version `version`, the last, would leave things.
  void UndoTheLastCommit(int64_t version) {
    auto undone = ds_->Write<bool>([&](db::Tx& tx) -> Result<bool> {
      FP_TRY(tx.Exec("DELETE FROM nat_entry WHERE version_added = ?", version));
      FP_TRY(tx.Exec("UPDATE counter SET value = ? WHERE name = 'nat_version'", version - 1));
      if (tx.postgres()) {  // the version the lost commit took is taken again
        FP_TRY(tx.Query("SELECT setval('nat_version_seq', greatest(?, 1), ? > 0)", version - 1,
                        version - 1));
      }
      return true;
    });
    ASSERT_TRUE(undone) << undone.error().message();
  }

  // Three commits reach both switches; the last is undone (UndoTheLastCommit), with the
  // heartbeats started before it (`read_before_the_undo`: the desired table read at version 3)
  // or after. The switches are put back at version 2, and the next commit, which takes version
  // 3 again, reaches them.
  void ExpectAnUndoneCommitPutBack(bool read_before_the_undo) {
    for (int n = 1; n <= 3; ++n) AddNatEntry(*ds_, n);
    ASSERT_TRUE(nat_.Sync());
    if (read_before_the_undo) {
      nat_.StartBackground(20);
      ASSERT_TRUE(fp::testing::WaitFor([&] {
        return StatusOf(0).last_full_reconcile != 0 && StatusOf(1).last_full_reconcile != 0;
      }));
      ASSERT_EQ(nat_.desired_version(), 3);
    }
    ASSERT_NO_FATAL_FAILURE(UndoTheLastCommit(3));
    if (!read_before_the_undo) nat_.StartBackground(20);
    EXPECT_TRUE(fp::testing::WaitFor([&] {
      return sims_[0]->Nat() == Desired() && sims_[1]->Nat() == Desired();
    })) << "the switches still hold the undone entry";
    AddNatEntry(*ds_, 4);  // version 3 again, another entry
    ASSERT_TRUE(nat_.Sync());
    EXPECT_EQ(sims_[0]->Nat(), Desired());
    EXPECT_EQ(sims_[1]->Nat(), Desired());
    nat_.StopBackground();
  }

  SwitchNatStatus StatusOf(size_t k) {
    for (const auto& s : nat_.SwitchStatuses()) {
      if (s.address == sims_[k]->base_url()) return s;
    }
    ADD_FAILURE() << "no status for switch " << k;
    return {};
  }

  db::testing::TempDatastore ds_;
  std::vector<std::unique_ptr<agents::daemon::SwitchAgentDaemon>> sims_;
  NatReconciler nat_{*ds_};
};

// A retarget is a removal followed by the addition of the same address; a batch never ends
// between the two when the feed read was cut there.
TEST(BatchLengthTest, AFullReadEndingInARemovalLeavesItForTheNextBatch) {
  auto changes = [](std::vector<bool> deleted) {
    std::vector<db::NatFeedChange> out;
    for (size_t i = 0; i < deleted.size(); ++i) {
      out.push_back(db::NatFeedChange{{}, static_cast<int64_t>(i + 1), deleted[i]});
    }
    return out;
  };
  EXPECT_EQ(BatchLength(changes({false, false, true}), 3), 2u);
  EXPECT_EQ(BatchLength(changes({false, true, false}), 3), 3u);
  EXPECT_EQ(BatchLength(changes({false, true}), 3), 2u) << "the read was not cut";
  EXPECT_EQ(BatchLength(changes({true}), 1), 1u) << "a lone removal still goes";
  EXPECT_EQ(BatchLength({}, 3), 0u);
}

TEST_F(SwitchesTest, EverySwitchHoldsEveryEntry) {
  for (int n = 1; n <= 3; ++n) AddNatEntry(*ds_, n);
  ASSERT_TRUE(nat_.Sync());
  EXPECT_EQ(sims_[0]->Nat(), Desired());
  EXPECT_EQ(sims_[1]->Nat(), Desired());
}

TEST_F(SwitchesTest, ASwitchThatIsDownNeitherFailsSyncNorLosesEntries) {
  AddNatEntry(*ds_, 1);
  ASSERT_TRUE(nat_.Sync());
  TakeDown(1);
  AddNatEntry(*ds_, 2);
  Status synced = nat_.Sync();
  ASSERT_TRUE(synced) << synced.error().message();
  EXPECT_EQ(sims_[0]->Nat(), Desired());
  EXPECT_EQ(sims_[1]->Nat().entries.size(), 1u);
  EXPECT_FALSE(StatusOf(1).reachable);

  // Back up: its heartbeat brings it up to date without any Sync.
  BringUp(1);
  nat_.StartBackground(20);
  EXPECT_TRUE(fp::testing::WaitFor([&] { return sims_[1]->Nat() == Desired(); }));
  EXPECT_TRUE(StatusOf(1).reachable);
  nat_.StopBackground();
}

TEST_F(SwitchesTest, SyncFailsWhenNoSwitchAnswers) {
  TakeDown(0);
  TakeDown(1);
  AddNatEntry(*ds_, 1);
  Status synced = nat_.Sync();
  ASSERT_FALSE(synced);
  EXPECT_EQ(synced.error().kind(), ErrorKind::kServiceUnavailable);
}

TEST_F(SwitchesTest, ASwitchThatAnswersButRefusesAChangeFailsSync) {
  AddNatEntry(*ds_, 1);
  Control(1, "POST", "/faults", R"({"endpoint": "POST /nat/changes", "apply_first": 0})");
  Status synced = nat_.Sync();
  ASSERT_FALSE(synced);
  EXPECT_NE(synced.error().message().find(sims_[1]->base_url()), std::string::npos)
      << synced.error().message();
  EXPECT_NE(synced.error().message().find("stopped at NAT generation 0 of 1"), std::string::npos)
      << synced.error().message();
  // With the switch's own reason.
  EXPECT_NE(synced.error().message().find("(injected fault: apply_first 0"), std::string::npos)
      << synced.error().message();
}

TEST_F(SwitchesTest, TheHeartbeatReloadsASwitchThatRestartedEmpty) {
  for (int n = 1; n <= 300; ++n) AddNatEntry(*ds_, n);
  ASSERT_TRUE(nat_.Sync());
  nat_.StartBackground(50);
  ASSERT_TRUE(fp::testing::WaitFor([&] { return StatusOf(0).last_full_reconcile != 0; }));
  Control(0, "POST", "/reset");
  auto reset_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(fp::testing::WaitFor([&] { return sims_[0]->Nat() == Desired(); }));
  // Within a few heartbeats (generously, for sanitizer builds), not at a periodic comparison.
  EXPECT_LT(std::chrono::steady_clock::now() - reset_at, milliseconds(1500));
  ASSERT_TRUE(fp::testing::WaitFor([&] { return StatusOf(0).reloads > 0; }));
  EXPECT_EQ(StatusOf(0).restarts_seen, 1);
  EXPECT_EQ(StatusOf(0).reloads, 1);
  EXPECT_EQ(StatusOf(0).repaired_missing, 300);
  nat_.StopBackground();
}

// A reload clears what the reconciler knows of the switch's run (its next change asks first):
// a switch that restarts again before the next heartbeat is still counted as restarted.
TEST_F(SwitchesTest, EveryRestartIsCountedEvenRightAfterAReload) {
  for (int n = 1; n <= 3; ++n) AddNatEntry(*ds_, n);
  ASSERT_TRUE(nat_.Sync());
  nat_.StartBackground(1000);  // a second between heartbeats: the second reset lands between
  Control(0, "POST", "/reset");
  ASSERT_TRUE(fp::testing::WaitFor([&] { return StatusOf(0).reloads == 1; }));
  Control(0, "POST", "/reset");
  ASSERT_TRUE(fp::testing::WaitFor([&] { return StatusOf(0).reloads == 2; }));
  EXPECT_EQ(StatusOf(0).restarts_seen, 2);
  nat_.StopBackground();
}

// A switch at the datastore's generation whose table differs (an entry lost behind the control
// plane's back) is found by its digest and repaired.
TEST_F(SwitchesTest, DriftAtTheSameGenerationIsFoundByDigestAndRepaired) {
  for (int n = 1; n <= 3; ++n) AddNatEntry(*ds_, n);
  ASSERT_TRUE(nat_.Sync());
  agents::NatTable drifted = Desired();
  drifted.entries.erase(drifted.entries.begin());
  drifted.entries.back().vni = 99;  // and one retargeted
  nlohmann::json body = drifted.ToJson();
  body["if_generation"] = drifted.generation;
  Control(1, "PUT", "/nat", body.dump());
  ASSERT_EQ(sims_[1]->Nat().generation, Desired().generation);
  ASSERT_NE(sims_[1]->CurrentStatus().digest, sims_[0]->CurrentStatus().digest);

  nat_.StartBackground(20);
  EXPECT_TRUE(fp::testing::WaitFor(
      [&] { return sims_[1]->Nat() == Desired() && StatusOf(1).repaired_missing > 0; }));
  EXPECT_EQ(StatusOf(1).repaired_missing, 1);
  EXPECT_EQ(StatusOf(1).repaired_wrong, 1);
  EXPECT_EQ(StatusOf(1).repaired_extra, 0);
  EXPECT_EQ(StatusOf(0).repaired_missing + StatusOf(0).repaired_wrong, 0);
  nat_.StopBackground();
}

// Removes the live row added at version `added` at the next version, as a detach does.
void RemoveRowAddedAt(db::Datastore& ds, int64_t added) {
  auto removed = ds.Write<bool>([&](db::Tx& tx) -> Result<bool> {
    int64_t at = FP_TRY(db::NatNextVersionIn(tx));
    FP_TRY(
        tx.Exec("UPDATE nat_entry SET version_removed = ?, time_deleted = 1 WHERE "
                "version_added = ?",
                at, added));
    return true;
  });
  ASSERT_TRUE(removed) << removed.error().message();
}

// What `desired` follows to through the feed is what a whole read of the table gives.
void ExpectFollowsTheWholeTable(db::Datastore& ds, DesiredNat& desired, int64_t version,
                                int64_t entries) {
  auto followed = desired.Current();
  ASSERT_TRUE(followed) << followed.error().message();
  DesiredNat fresh(ds);
  auto whole = fresh.Current();
  ASSERT_TRUE(whole);
  EXPECT_EQ(followed->version, version);
  EXPECT_EQ(followed->entries, entries);
  EXPECT_EQ(followed->digest, whole->digest);
}

// A row added and removed between two reads shows in the feed only as its removal: the digest
// followed through the feed stays the whole table's.
TEST_F(SwitchesTest, TheDesiredDigestFollowsARowAddedAndRemovedBetweenTwoReads) {
  AddNatEntry(*ds_, 1);
  DesiredNat desired(*ds_);
  ASSERT_TRUE(desired.Current());
  AddNatEntry(*ds_, 2);                                // version 2
  ASSERT_NO_FATAL_FAILURE(RemoveRowAddedAt(*ds_, 2));  // at 3, before the next read
  AddNatEntry(*ds_, 3);                                // version 4
  ASSERT_NO_FATAL_FAILURE(ExpectFollowsTheWholeTable(*ds_, desired, 4, 2));
}

// The same when a change after the row's addition comes before its removal: by the removal,
// the position has passed the row's addition, which was still never counted.
TEST_F(SwitchesTest, TheDesiredDigestIgnoresTheRemovalOfARowItNeverCounted) {
  AddNatEntry(*ds_, 1);
  DesiredNat desired(*ds_);
  ASSERT_TRUE(desired.Current());
  AddNatEntry(*ds_, 2);                                // version 2
  AddNatEntry(*ds_, 3);                                // version 3
  ASSERT_NO_FATAL_FAILURE(RemoveRowAddedAt(*ds_, 2));  // at 4, before the next read
  ASSERT_NO_FATAL_FAILURE(ExpectFollowsTheWholeTable(*ds_, desired, 4, 2));
}

// The desired table as last read stands for the datastore's version while it is recent and no
// sync of this server has begun a read since (each change this server makes is followed by
// one): what lets an idle server's heartbeats skip their reads (below).
TEST(DesiredNatTest, ARecentReadStandsInUntilItAgesOrASyncReadsTheFeed) {
  auto clock = std::make_shared<fp::testing::ManualClock>();
  db::testing::TempDatastore ds(clock);
  AddNatEntry(*ds, 1);
  DesiredNat desired(*ds);
  EXPECT_FALSE(desired.Recent(std::chrono::seconds(1))) << "nothing read yet";
  auto read = desired.Current();
  ASSERT_TRUE(read) << read.error().message();
  auto recent = desired.Recent(std::chrono::seconds(1));
  ASSERT_TRUE(recent);
  EXPECT_EQ(recent->version, read->version);
  EXPECT_EQ(recent->digest, read->digest);
  clock->Advance(milliseconds(999));
  EXPECT_TRUE(desired.Recent(std::chrono::seconds(1)));
  clock->Advance(milliseconds(1));
  EXPECT_FALSE(desired.Recent(std::chrono::seconds(1))) << "read a second ago";
  ASSERT_TRUE(desired.Current());
  EXPECT_TRUE(desired.Recent(std::chrono::seconds(1)));
  desired.NoteSync();  // a sync, after a change of this server's
  EXPECT_FALSE(desired.Recent(std::chrono::seconds(1))) << "a sync began since";

  // A read that fails leaves no recent point: the next heartbeat reads again.
  ASSERT_TRUE(desired.Current());
  auto rename = [&](const char* sql) {
    ASSERT_TRUE(ds->Write<bool>([&](db::Tx& tx) -> Result<bool> {
      FP_TRY(tx.Exec(sql));
      return true;
    }));
  };
  ASSERT_NO_FATAL_FAILURE(rename("ALTER TABLE counter RENAME TO counter_away"));
  EXPECT_FALSE(desired.Current()) << "the feed read without its version's table";
  EXPECT_FALSE(desired.Recent(std::chrono::seconds(1))) << "after a read that failed";
  ASSERT_NO_FATAL_FAILURE(rename("ALTER TABLE counter_away RENAME TO counter"));
  ASSERT_TRUE(desired.Current());
  EXPECT_TRUE(desired.Recent(std::chrono::seconds(1)));
}

// A crash undid a commit the switches already had: they are ahead of the datastore. Their
// tables are put back at the datastore's version (not left labelled with their own), so the
// next commit, which takes the version again, is installed rather than skipped as installed.
TEST_F(SwitchesTest, ASwitchAheadOfTheDatastoreIsPutBackAndTakesTheNextCommit) {
  ExpectAnUndoneCommitPutBack(/*read_before_the_undo=*/false);
}

// The same under a running server whose desired table was read before the undo: the digest it
// followed counted the undone commit, which the switches have, so they agreed with it and were
// never put back, and the next commit, taking the version again, was skipped as installed. A
// datastore version below the followed one makes the table be read whole.
TEST_F(SwitchesTest, ADatastoreThatWentBackUnderARunningServerIsReadWholeAndTheSwitchesPutBack) {
  ExpectAnUndoneCommitPutBack(/*read_before_the_undo=*/true);
}

// The heartbeats on a clock that moves only when told: each Tick is one period, and returns
// once every switch's heartbeat of it has run.
class SwitchHeartbeatTest : public ::testing::Test {
 protected:
  static constexpr milliseconds kPeriod{100};

  void TearDown() override { nat_.StopBackground(); }

  // `switches` switch agents holding one entry; the heartbeats started, their first run.
  void Start(int switches) {
    for (int i = 0; i < switches; ++i) {
      sims_.push_back(agents::daemon::SwitchAgentDaemon::Start({}).value());
      nat_.AddSwitch(agents::MakeSwitchAgentClient(sims_.back()->base_url(), 1000));
    }
    AddNatEntry(*ds_, 1);
    ASSERT_TRUE(nat_.Sync());
    nat_.StartBackground(static_cast<int>(kPeriod.count()));  // a first heartbeat at once
    const Timestamp now = clock_->Now();
    ASSERT_TRUE(fp::testing::WaitFor([&] { return AllAgreedSince(now); }));
  }

  // Moves the clock one period; true once every switch's heartbeat found it equal to the
  // desired table since, or `done` holds (a heartbeat that brought a switch up to date).
  bool Tick(const std::function<bool()>& done = nullptr) {
    clock_->Advance(kPeriod);
    const Timestamp now = clock_->Now();
    return fp::testing::WaitFor([&] { return (done && done()) || AllAgreedSince(now); });
  }

  bool AllAgreedSince(Timestamp t) {
    for (const auto& s : nat_.SwitchStatuses()) {
      if (s.last_full_reconcile < t) return false;
    }
    return true;
  }
  bool AllHoldTheDesiredTable() {
    for (const auto& sim : sims_) {
      if (sim->Nat() != testing::DesiredTable(*ds_)) return false;
    }
    return true;
  }
  void Faults(size_t k, const std::string& method, const std::string& body = {}) {
    http::HttpClient control("switch agent", sims_[k]->base_url(), milliseconds(2000));
    auto answer = control.Call(method, "/faults", body);
    ASSERT_TRUE(answer) << answer.error().message();
    ASSERT_EQ(answer->status, 200) << answer->body;
  }

  std::shared_ptr<fp::testing::ManualClock> clock_ = std::make_shared<fp::testing::ManualClock>();
  db::testing::TempDatastore ds_{clock_};
  std::vector<std::unique_ptr<agents::daemon::SwitchAgentDaemon>> sims_;
  NatReconciler nat_{*ds_};
};

// An idle server's heartbeats read the datastore once every kHeartbeatsPerRead periods for
// both switches, not each switch at every period (20 reads a second on two switches, each a
// transaction); a change committed without a sync of this server (another server's, whose
// push did not reach the switches) still reaches both within that many periods.
TEST_F(SwitchHeartbeatTest, IdleHeartbeatsReadTheDatastoreOnceInSeveralPeriodsAndStillFindChanges) {
  ASSERT_NO_FATAL_FAILURE(Start(2));
  const int64_t reads = ds_->read_transactions();
  for (int k = 0; k < 3 * NatReconciler::kHeartbeatsPerRead; ++k) ASSERT_TRUE(Tick()) << k;
  // The read ages at periods 10, 20 and 30; both heartbeats may read at such a period.
  EXPECT_LE(ds_->read_transactions() - reads, 6) << "60 heartbeats, each of which read before";
  AddNatEntry(*ds_, 2);
  for (int k = 0; k < NatReconciler::kHeartbeatsPerRead && !AllHoldTheDesiredTable(); ++k) {
    ASSERT_TRUE(Tick([&] { return AllHoldTheDesiredTable(); })) << k;
  }
  EXPECT_TRUE(AllHoldTheDesiredTable()) << "a change without a sync here never reached them";
}

// A switch that missed a change of this server's (it did not answer the change's sync) is
// brought to it by its first heartbeat once it answers again: the sync made the desired table
// the heartbeat judged on old, though the switch still agrees with it. (One switch: with two,
// the other one's heartbeat reads the feed for both.)
TEST_F(SwitchHeartbeatTest, ASwitchThatMissedThisServersChangeTakesItAtItsNextHeartbeat) {
  ASSERT_NO_FATAL_FAILURE(Start(1));
  ASSERT_NO_FATAL_FAILURE(Faults(0, "POST", R"({"endpoint": "*", "fail_next": 1000000})"));
  AddNatEntry(*ds_, 2);
  EXPECT_FALSE(nat_.Sync()) << "the only switch answered 503";
  ASSERT_NO_FATAL_FAILURE(Faults(0, "DELETE"));
  EXPECT_FALSE(AllHoldTheDesiredTable());
  Tick([&] { return AllHoldTheDesiredTable(); });
  EXPECT_TRUE(AllHoldTheDesiredTable()) << "the switch was judged on the read made before it";
}

TEST_F(SwitchesTest, GarbageCollectionWaitsForEverySwitchThatAnswers) {
  const Timestamp now = int64_t{1'800'000'000} * 1'000'000;
  const Timestamp old = now - NatReconciler::kGarbageRetention - 1;
  AddNatEntry(*ds_, 1);  // version 1
  AddNatEntry(*ds_, 2);  // version 2
  auto remove = [&](int64_t added) {
    auto removed = ds_->Write<bool>([&](db::Tx& tx) -> Result<bool> {
      const int64_t version = FP_TRY(db::NatNextVersionIn(tx));
      FP_TRY(tx.Exec(
          "UPDATE nat_entry SET version_removed = ?, time_deleted = ? WHERE version_added = ?",
          version, old, added));
      return true;
    });
    ASSERT_TRUE(removed) << removed.error().message();
  };
  remove(1);  // version 3
  ASSERT_TRUE(nat_.Sync());
  TakeDown(1);
  remove(2);             // version 4: only switch 0 installs it
  AddNatEntry(*ds_, 3);  // version 5
  ASSERT_TRUE(nat_.Sync());
  // Switch 1 does not answer: it is left out, and switch 0 (at 5) lets both removals go.
  auto collected = nat_.CollectGarbage(now);
  ASSERT_TRUE(collected) << collected.error().message();
  EXPECT_EQ(*collected, 2);

  // Switch 1 comes back at generation 3, holding entry 2 whose removal row is gone: the feed
  // cannot tell it, but its digest differs at the datastore's version, and it is repaired.
  BringUp(1);
  nat_.StartBackground(20);
  EXPECT_TRUE(fp::testing::WaitFor(
      [&] { return sims_[1]->Nat() == Desired() && StatusOf(1).repaired_extra > 0; }));
  EXPECT_EQ(StatusOf(1).repaired_extra, 1);
  nat_.StopBackground();
}

TEST_F(SwitchesTest, GarbageCollectionKeepsWhatAnAnsweringSwitchLacks) {
  const Timestamp now = int64_t{1'800'000'000} * 1'000'000;
  AddNatEntry(*ds_, 1);
  auto removed = ds_->Write<bool>([&](db::Tx& tx) -> Result<bool> {
    const int64_t version = FP_TRY(db::NatNextVersionIn(tx));
    FP_TRY(tx.Exec(
        "UPDATE nat_entry SET version_removed = ?, time_deleted = ? WHERE version_added = 1",
        version, now - NatReconciler::kGarbageRetention - 1));
    return true;
  });
  ASSERT_TRUE(removed);
  AddNatEntry(*ds_, 2);  // version 3
  ASSERT_TRUE(nat_.Sync());
  // Switch 1 answers but is behind (generation 1): the removal at 2 stays for it.
  agents::NatTable behind{1, {}};
  Control(1, "POST", "/reset");
  nlohmann::json body = behind.ToJson();
  Control(1, "PUT", "/nat", body.dump());
  auto collected = nat_.CollectGarbage(now);
  ASSERT_TRUE(collected) << collected.error().message();
  EXPECT_EQ(*collected, 0);
}

TEST_F(SwitchesTest, ASwitchAddedAtRuntimeIsLoadedAndOneRemovedIsLeftAlone) {
  for (int n = 1; n <= 5; ++n) AddNatEntry(*ds_, n);
  ASSERT_TRUE(nat_.Sync());
  nat_.StartBackground(20);
  auto third = agents::daemon::SwitchAgentDaemon::Start({}).value();
  nat_.AddSwitch(agents::MakeSwitchAgentClient(third->base_url(), 1000));
  EXPECT_TRUE(fp::testing::WaitFor([&] { return third->Nat() == Desired(); }));

  ASSERT_TRUE(nat_.RemoveSwitch(sims_[1]->base_url()));
  EXPECT_FALSE(nat_.RemoveSwitch(sims_[1]->base_url()));
  EXPECT_EQ(nat_.SwitchAddresses().size(), 2u);
  AddNatEntry(*ds_, 6);
  ASSERT_TRUE(nat_.Sync());
  EXPECT_EQ(third->Nat(), Desired());
  EXPECT_EQ(sims_[1]->Nat().entries.size(), 5u);  // no longer sent changes
  nat_.StopBackground();
}

}  // namespace
}  // namespace fp::loops
