// NatReconciler::Sync: a caller returns only after an exchange that covers its commits (never
// on the strength of one already in flight when it committed), concurrent callers do not cost
// an exchange each, and a failed exchange fails only the caller it was for. Against the
// simulated switch agent over HTTP: a batch the switch installs only in part is resent from
// where the switch stopped, and Repair restores a switch that lost its state.

#include "loops/nat_reconciler.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <semaphore>
#include <thread>
#include <utility>
#include <vector>

#include "agents/daemon/switch_agent.h"
#include "common/mutex.h"
#include "common/testing/wait_for.h"
#include "db/nat.h"
#include "db/testing/temp_datastore.h"
#include "http/client.h"
#include "loops/switch_reconciler.h"
#include "loops/testing/nat_rows.h"

namespace fp::loops {
namespace {

using db::testing::TempDatastore;
using fp::testing::WaitFor;
using testing::AddNatEntry;
using testing::AddNatEntryIn;

// A switch that records what it was sent; the first ApplyChanges can be held until released.
class FakeSwitch : public agents::SwitchAgentClient {
 public:
  static constexpr std::string_view kBoot = "fake-boot";
  explicit FakeSwitch(std::string address = "fake") : address_(std::move(address)) {}
  Result<agents::NatTable> GetNat() override {
    MutexLock lock(mu_);
    return agents::NatTable{generation_, {}};
  }
  Result<int64_t> ApplyChanges(const std::vector<agents::NatChange>& changes) override {
    MutexLock lock(mu_);
    ++apply_calls_;
    if (hold_first_ && apply_calls_ == 1) {
      held_ = true;
      cv_.notify_all();
      lock.Wait(cv_, [&]() FP_REQUIRES(mu_) { return released_; });
    }
    if (fail_first_ && apply_calls_ == 1) {
      return Fail(Error::Unavailable("switch agent at fake refused the change"));
    }
    for (const auto& c : changes) {
      generation_ = std::max(generation_, c.gen);
      applied_.push_back(c.gen);
    }
    return generation_;
  }
  using agents::SwitchAgentClient::ApplyChangesOn;
  Result<agents::NatApplied> ApplyChangesOn(const std::string& boot_id,
                                            const std::vector<agents::NatChange>& changes,
                                            const agents::CallContext&) override {
    if (boot_id != kBoot) return agents::NatApplied{generation(), std::string(kBoot), true};
    int64_t reached = FP_TRY(ApplyChanges(changes));
    return agents::NatApplied{reached, std::string(kBoot), false};
  }
  Result<agents::NatStatus> GetStatus() override {
    MutexLock lock(mu_);
    return agents::NatStatus{.boot_id = std::string(kBoot), .generation = generation_};
  }
  Result<int64_t> ReplaceAll(const agents::NatTable& table) override {
    MutexLock lock(mu_);
    generation_ = table.generation;
    return generation_;
  }
  Result<std::optional<int64_t>> ReplaceAllIf(const agents::NatTable& table,
                                              int64_t if_generation) override {
    MutexLock lock(mu_);
    if (generation_ != if_generation) return std::optional<int64_t>();
    generation_ = table.generation;
    return std::optional<int64_t>(generation_);
  }
  const std::string& address() const override { return address_; }

  void HoldFirstApply() {
    MutexLock lock(mu_);
    hold_first_ = true;
  }
  void WaitUntilHeld() {
    MutexLock lock(mu_);
    lock.Wait(cv_, [&]() FP_REQUIRES(mu_) { return held_; });
  }
  void Release(bool fail_first) {
    MutexLock lock(mu_);
    released_ = true;
    fail_first_ = fail_first;
    cv_.notify_all();
  }
  int apply_calls() {
    MutexLock lock(mu_);
    return apply_calls_;
  }
  int64_t generation() {
    MutexLock lock(mu_);
    return generation_;
  }
  // The version of every change it was sent, in order.
  std::vector<int64_t> applied() {
    MutexLock lock(mu_);
    return applied_;
  }

 private:
  Mutex mu_;
  std::condition_variable cv_;
  int64_t generation_ FP_GUARDED_BY(mu_) = 0;
  int apply_calls_ FP_GUARDED_BY(mu_) = 0;
  std::vector<int64_t> applied_ FP_GUARDED_BY(mu_);
  bool hold_first_ FP_GUARDED_BY(mu_) = false;
  bool held_ FP_GUARDED_BY(mu_) = false;
  bool released_ FP_GUARDED_BY(mu_) = false;
  bool fail_first_ FP_GUARDED_BY(mu_) = false;
  std::string address_;
};

class NatReconcilerTest : public ::testing::Test {
 protected:
  void ExpectSyncOk() {
    Status s = nat.Sync();
    EXPECT_TRUE(s) << s.error().message();
  }

  void AddEntry() { AddNatEntry(*ds, ++entries_); }

  // Marks the entry added as version `added` removed, at the next version, at time `when`.
  void RemoveEntry(int64_t added, Timestamp when) {
    auto removed = ds->Write<bool>([&](db::Tx& tx) -> Result<bool> {
      const int64_t version = FP_TRY(db::NatNextVersionIn(tx));
      FP_TRY(tx.Exec(
          "UPDATE nat_entry SET version_removed = ?, time_deleted = ? WHERE version_added = ?",
          version, when, added));
      return true;
    });
    ASSERT_TRUE(removed) << removed.error().message();
  }

  // A first caller's exchange is held on each of `held`; eight callers commit a change each
  // and sync meanwhile; then the switches answer. The reads of the datastore from then until
  // every caller returned.
  int64_t ReadsOfEightCallersWaitingOut(const std::vector<FakeSwitch*>& held) {
    for (FakeSwitch* s : held) s->HoldFirstApply();
    std::thread first([&] { ExpectSyncOk(); });
    for (FakeSwitch* s : held) s->WaitUntilHeld();
    std::vector<std::thread> later;
    for (int i = 0; i < 8; ++i) {
      AddEntry();
      later.emplace_back([&] { ExpectSyncOk(); });
    }
    // Each caller queues its syncs of the other switches before it waits for the first.
    EXPECT_TRUE(WaitFor([&] { return nat.SwitchStatuses().at(0).waiting_syncs == 8; }));
    const int64_t reads = ds->read_transactions();
    for (FakeSwitch* s : held) s->Release(false);
    first.join();
    for (auto& t : later) t.join();
    return ds->read_transactions() - reads;
  }

  std::vector<int64_t> RowsLeft() {
    return ds
        ->Read<std::vector<int64_t>>([](db::Tx& tx) -> Result<std::vector<int64_t>> {
          std::vector<int64_t> out;
          for (const auto& r :
               FP_TRY(tx.Query("SELECT version_added FROM nat_entry ORDER BY version_added"))) {
            out.push_back(r.Int(0));
          }
          return out;
        })
        .value();
  }

  TempDatastore ds;
  FakeSwitch sw;
  NatReconciler nat{*ds, sw};
  int entries_ = 0;
};

TEST_F(NatReconcilerTest, CallersArrivingDuringAnExchangeWaitForOneThatCoversThem) {
  AddEntry();
  sw.HoldFirstApply();
  std::thread first([&] { ExpectSyncOk(); });
  sw.WaitUntilHeld();  // the first exchange carries version 1 and is now in flight

  // Eight callers commit a change each and call Sync while the switch is busy.
  std::vector<std::thread> later;
  std::atomic<int> returned{0};
  for (int i = 0; i < 8; ++i) {
    AddEntry();
    later.emplace_back([&] {
      ExpectSyncOk();
      ++returned;
    });
  }
  // All eight wait for the exchange in flight; none may return on the strength of that exchange,
  // which began before their commits.
  EXPECT_TRUE(WaitFor([&] { return nat.SwitchStatuses().at(0).waiting_syncs == 8; }));
  EXPECT_EQ(returned.load(), 0);
  sw.Release(false);
  first.join();
  for (auto& t : later) t.join();
  EXPECT_EQ(sw.generation(), 9);  // every caller's change reached the switch
  // One exchange for the first caller, then one (or, if a caller was slow to arrive, a few)
  // for the eight: not one each.
  EXPECT_LE(sw.apply_calls(), 4);
}

// Group sync: the exchange after the one in flight carries every waiting caller's changes,
// read once; the callers whose changes it carried read nothing more.
TEST_F(NatReconcilerTest, CallersCarriedByTheNextExchangeReadTheFeedNoMore) {
  AddEntry();
  EXPECT_EQ(ReadsOfEightCallersWaitingOut({&sw}), 1);  // the first of the eight to get the switch
  EXPECT_EQ(sw.apply_calls(), 2);
  EXPECT_EQ(sw.generation(), 9);
}

// The same with two switches, each held: the read the switches share is made only when one of
// them needs it, so the callers carried on both read nothing either.
TEST_F(NatReconcilerTest, WithTwoSwitchesCarriedCallersReadTheFeedNoMore) {
  auto second_switch = std::make_shared<FakeSwitch>("fake-2");
  nat.AddSwitch(second_switch);
  AddEntry();
  // One read for each switch's next exchange, or one between them when the same caller made
  // both; eight before (each caller read the shared feed before it waited).
  EXPECT_LE(ReadsOfEightCallersWaitingOut({&sw, second_switch.get()}), 2);
  EXPECT_EQ(sw.generation(), 9);
  EXPECT_EQ(second_switch->generation(), 9);
}

// A change's transaction reads the feed as it commits (ReadFeedAtCommitIn; on PostgreSQL right
// after, in the COMMIT's exchange): the Sync given its key pushes from that read and reads
// nothing, once; a key with no read kept reads the feed.
TEST_F(NatReconcilerTest, ASyncFromAReadMadeAsItsChangeCommittedReadsNothing) {
  AddEntry();
  ExpectSyncOk();  // the switch answered, at 1: where the reads start
  auto commit = [&](const Uuid& key) {
    Status s = ds->Write([&](db::Tx& tx) -> Status {
      FP_CHECK_OK(AddNatEntryIn(tx, ++entries_));
      return nat.ReadFeedAtCommitIn(tx, key);
    });
    ASSERT_TRUE(s) << s.error().message();
  };
  const Uuid key = Uuid::Random();
  commit(key);
  int64_t reads = ds->read_transactions();
  ASSERT_TRUE(nat.SyncWith({}, key));
  EXPECT_EQ(ds->read_transactions() - reads, 0);
  EXPECT_EQ(sw.generation(), 2);
  EXPECT_EQ(nat.KeptReads().used, 1);

  // Another change, and a third whose read (kept, then used) starts from 2: one read for the
  // Sync of the second, none for the third's.
  AddEntry();
  const Uuid third = Uuid::Random();
  commit(third);
  reads = ds->read_transactions();
  ASSERT_TRUE(nat.SyncWith({}, Uuid::Random()));
  EXPECT_EQ(ds->read_transactions() - reads, 1) << "no read kept under that key";
  EXPECT_EQ(nat.KeptReads().missed, 1);
  EXPECT_EQ(sw.generation(), 4);
  reads = ds->read_transactions();
  ASSERT_TRUE(nat.SyncWith({}, third));
  EXPECT_EQ(ds->read_transactions() - reads, 0) << "the switch is at 4 already";

  // A read kept from behind where the switch is serves for what it holds beyond it.
  const Uuid fifth = Uuid::Random();
  commit(fifth);  // read from 4: holds 5
  AddEntry();     // 6
  const Uuid seventh = Uuid::Random();
  commit(seventh);  // read from 4: holds 5, 6, 7
  reads = ds->read_transactions();
  ASSERT_TRUE(nat.SyncWith({}, seventh));
  EXPECT_EQ(ds->read_transactions() - reads, 0);
  EXPECT_EQ(sw.generation(), 7);
  EXPECT_EQ(sw.applied(), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7})) << "each change once";
}

// Reads kept past kKeptFeeds push out the oldest, and a read of more than kKeptChanges is not
// kept: each is counted dropped (a metric), and its Sync reads the feed itself.
TEST_F(NatReconcilerTest, KeptReadsPastTheirLimitsAreDroppedAndCounted) {
  AddEntry();
  ExpectSyncOk();
  auto commit = [&](const Uuid& key, int entries) {
    Status s = ds->Write([&](db::Tx& tx) -> Status {
      for (int k = 0; k < entries; ++k) FP_CHECK_OK(AddNatEntryIn(tx, ++entries_));
      return nat.ReadFeedAtCommitIn(tx, key);
    });
    ASSERT_TRUE(s) << s.error().message();
  };
  std::vector<Uuid> keys;
  for (size_t i = 0; i <= NatReconciler::kKeptFeeds; ++i) {
    keys.push_back(Uuid::Random());
    commit(keys.back(), 1);
    if (i % 30 == 29) ExpectSyncOk();  // so that each read holds at most 30 changes
  }
  EXPECT_EQ(nat.KeptReads().dropped, 1);
  int64_t reads = ds->read_transactions();
  ASSERT_TRUE(nat.SyncWith({}, keys.front()));
  EXPECT_EQ(ds->read_transactions() - reads, 1) << "the oldest read was dropped";
  ASSERT_TRUE(nat.SyncWith({}, keys.back()));
  EXPECT_EQ(nat.KeptReads().missed, 1);
  EXPECT_EQ(nat.KeptReads().used, 1);

  const Uuid large = Uuid::Random();
  commit(large, static_cast<int>(NatReconciler::kKeptChanges));
  EXPECT_EQ(nat.KeptReads().dropped, 2);
  reads = ds->read_transactions();
  ASSERT_TRUE(nat.SyncWith({}, large));
  EXPECT_GE(ds->read_transactions() - reads, 1);
  EXPECT_EQ(nat.KeptReads().missed, 2);
  EXPECT_EQ(sw.generation(), entries_);
}

// An exchange carries only the callers that came before its read of the feed began, whatever
// reads began while it was in flight: here the second switch's read for the later caller.
TEST_F(NatReconcilerTest, AnExchangeWhoseReadBeganBeforeACallerCameDoesNotCarryIt) {
  auto second_switch = std::make_shared<FakeSwitch>("fake-2");
  nat.AddSwitch(second_switch);
  AddEntry();
  sw.HoldFirstApply();
  std::thread first([&] { ExpectSyncOk(); });  // its read holds version 1 only
  sw.WaitUntilHeld();
  AddEntry();
  std::thread later([&] { ExpectSyncOk(); });
  // The later caller's read for the second switch, made while the first switch is held.
  EXPECT_TRUE(WaitFor([&] { return second_switch->generation() == 2; }));
  sw.Release(false);
  first.join();
  later.join();
  EXPECT_EQ(sw.generation(), 2);  // the later caller's change reached the first switch too
}

TEST_F(NatReconcilerTest, AFailedExchangeFailsOnlyTheCallersItCovered) {
  AddEntry();
  sw.HoldFirstApply();
  std::thread first([&] { EXPECT_FALSE(nat.Sync()); });
  sw.WaitUntilHeld();
  AddEntry();
  std::thread second([&] { ExpectSyncOk(); });  // arrives during the failing exchange
  EXPECT_TRUE(WaitFor([&] { return nat.SwitchStatuses().at(0).waiting_syncs == 1; }));
  sw.Release(/*fail_first=*/true);
  first.join();
  // The second caller's commit was not covered by the failed exchange: it ran one of its own.
  second.join();
  EXPECT_EQ(sw.generation(), 2);
}

// §5.6: a removed row is deleted once the switch has installed its removal (version below both
// the datastore's version and the switch's generation) and it was removed over two weeks ago;
// live rows, recent removals and removals the switch may still need stay.
TEST_F(NatReconcilerTest, GarbageCollectionDeletesOnlyOldRemovalsTheSwitchHasInstalled) {
  const Timestamp now = int64_t{1'800'000'000} * 1'000'000;
  const Timestamp day = int64_t{24} * 3600 * 1'000'000;
  for (int i = 0; i < 4; ++i) AddEntry();               // versions 1-4
  RemoveEntry(1, now - 15 * day);                       // removed at version 5: old
  RemoveEntry(2, now - 1 * day);                        // removed at version 6: recent
  RemoveEntry(3, now - 15 * day);                       // removed at version 7: old
  AddEntry();                                           // version 8: the datastore is at 8
  ASSERT_TRUE(sw.ReplaceAll(agents::NatTable{7, {}}));  // the switch installed up to 7

  auto collected = nat.CollectGarbage(now);
  ASSERT_TRUE(collected) << collected.error().message();
  EXPECT_EQ(*collected, 1);
  // 1 went (old, and below the switch's generation); 2 is recent; 3's removal, at 7, is not
  // below the switch's generation 7 (the comparison is strict, as Oxide's is).
  EXPECT_EQ(RowsLeft(), (std::vector<int64_t>{2, 3, 4, 8}));

  ASSERT_TRUE(sw.ReplaceAll(agents::NatTable{8, {}}));  // the switch caught up
  collected = nat.CollectGarbage(now);
  ASSERT_TRUE(collected) << collected.error().message();
  EXPECT_EQ(*collected, 1);
  EXPECT_EQ(RowsLeft(), (std::vector<int64_t>{2, 4, 8}));

  // Two weeks after its removal, 2 goes too; live rows never do.
  collected = nat.CollectGarbage(now + 14 * day);
  ASSERT_TRUE(collected) << collected.error().message();
  EXPECT_EQ(RowsLeft(), (std::vector<int64_t>{4, 8}));
}

// The reconciler against the simulated switch agent over HTTP.
class NatReconcilerOnSwitchTest : public ::testing::Test {
 protected:
  agents::NatTable Desired() { return testing::DesiredTable(*ds); }

  void Control(const std::string& method, const std::string& path, const std::string& body = {}) {
    auto answer = control->Call(method, path, body);
    ASSERT_TRUE(answer) << answer.error().message();
    ASSERT_EQ(answer->status, 200) << answer->body;
  }

  TempDatastore ds;
  std::unique_ptr<agents::daemon::SwitchAgentDaemon> sim =
      agents::daemon::SwitchAgentDaemon::Start({}).value();
  std::unique_ptr<agents::SwitchAgentClient> client =
      agents::MakeSwitchAgentClient(sim->base_url(), 2000);
  std::unique_ptr<http::HttpClient> control = std::make_unique<http::HttpClient>(
      "switch agent", sim->base_url(), std::chrono::milliseconds(2000));
  NatReconciler nat{*ds, *client};
};

// The switch answers a batch having installed only its first changes: Sync must report the
// failure (its caller's change is not on the switch) and must not count the rest as installed,
// so that they are sent again and arrive once the switch recovers.
TEST_F(NatReconcilerOnSwitchTest, ABatchInstalledInPartIsResentFromWhereTheSwitchStopped) {
  for (int n = 1; n <= 5; ++n) AddNatEntry(*ds, n);
  Control("POST", "/faults", R"({"endpoint": "POST /nat/changes", "apply_first": 2})");

  Status first = nat.Sync();
  ASSERT_FALSE(first);
  EXPECT_EQ(first.error().kind(), ErrorKind::kServiceUnavailable);
  EXPECT_NE(first.error().message().find("switch agent at " + sim->base_url()), std::string::npos)
      << first.error().message();
  EXPECT_NE(first.error().message().find("stopped at NAT generation 2 of 5"), std::string::npos)
      << first.error().message();
  EXPECT_EQ(sim->Nat().generation, 2);
  EXPECT_EQ(sim->Nat().entries.size(), 2u);

  // Still failing: the next Sync sends the changes after generation 2 again (not nothing, as it
  // would if it had counted the batch as installed), and fails again.
  EXPECT_FALSE(nat.Sync());
  EXPECT_EQ(sim->Nat().generation, 4);

  Control("DELETE", "/faults");
  Status recovered = nat.Sync();
  ASSERT_TRUE(recovered) << recovered.error().message();
  EXPECT_EQ(sim->Nat(), Desired());
  EXPECT_EQ(sim->Nat().entries.size(), 5u);
}

// A switch agent that restarts loses its table and its generation (POST /reset). Sync alone
// cannot see that (it remembers the generation it last installed); Repair compares the whole
// tables and restores the switch, generation included, and the feed then continues from there.
TEST_F(NatReconcilerOnSwitchTest, RepairRestoresTheTableAndGenerationOfASwitchThatLostItsState) {
  for (int n = 1; n <= 3; ++n) AddNatEntry(*ds, n);
  ASSERT_TRUE(nat.Sync());
  ASSERT_EQ(sim->Nat(), Desired());

  Control("POST", "/reset");
  ASSERT_EQ(sim->Nat(), agents::NatTable{});
  auto repaired = nat.Repair();
  ASSERT_TRUE(repaired) << repaired.error().message();
  EXPECT_TRUE(*repaired);
  EXPECT_EQ(sim->Nat(), Desired());
  EXPECT_EQ(sim->Nat().generation, 3);
  EXPECT_EQ(sim->Nat().entries.size(), 3u);

  // Nothing left to repair; the next change arrives through the feed.
  EXPECT_FALSE(nat.Repair().value());
  AddNatEntry(*ds, 4);
  ASSERT_TRUE(nat.Sync());
  EXPECT_EQ(sim->Nat(), Desired());
  EXPECT_EQ(sim->Nat().generation, 4);
}

// A switch client that runs a hook (another server's work) before it forwards a replacement or
// a repair.
class HookedSwitch : public agents::SwitchAgentClient {
 public:
  explicit HookedSwitch(agents::SwitchAgentClient& inner) : inner_(inner) {}
  Result<agents::NatTable> GetNat() override { return inner_.GetNat(); }
  Result<int64_t> ApplyChanges(const std::vector<agents::NatChange>& changes) override {
    return inner_.ApplyChanges(changes);
  }
  using agents::SwitchAgentClient::ApplyChangesOn;
  Result<agents::NatApplied> ApplyChangesOn(const std::string& boot_id,
                                            const std::vector<agents::NatChange>& changes,
                                            const agents::CallContext& context) override {
    return inner_.ApplyChangesOn(boot_id, changes, context);
  }
  Result<agents::NatStatus> GetStatus() override { return inner_.GetStatus(); }
  Result<int64_t> ReplaceAll(const agents::NatTable& table) override {
    RunHook();
    return inner_.ReplaceAll(table);
  }
  Result<std::optional<int64_t>> ReplaceAllIf(const agents::NatTable& table,
                                              int64_t if_generation) override {
    RunHook();
    return inner_.ReplaceAllIf(table, if_generation);
  }
  Result<agents::NatBuckets> GetNatBuckets(uint32_t count) override {
    return inner_.GetNatBuckets(count);
  }
  Result<agents::NatBucketsRepaired> RepairBucketsWritten(std::string body) override {
    RunHook();
    repairs_sent.push_back(body);
    return inner_.RepairBucketsWritten(std::move(body));
  }
  const std::string& address() const override { return inner_.address(); }
  std::function<void()> before_replace;
  std::vector<std::string> repairs_sent;  // POST /nat/buckets bodies

 private:
  void RunHook() {
    if (auto hook = std::exchange(before_replace, nullptr)) hook();
  }
  agents::SwitchAgentClient& inner_;
};

// Two servers on one database and one switch: server A repairs a drifted switch while server B
// commits and syncs a new change between A's reading of the datastore and A's replacement. A's
// table lacks B's change, so the replacement must not happen (it would take B's acknowledged
// change off the switch, and B, believing the switch has it, would not send it again); A's next
// pass repairs with B's change included.
TEST_F(NatReconcilerOnSwitchTest, ARepairNeverOverwritesAChangeAnotherServerSyncedMeanwhile) {
  for (int n = 1; n <= 2; ++n) AddNatEntry(*ds, n);
  ASSERT_TRUE(nat.Sync());
  // Drift: the switch loses its state and gets a stray change, so a repair will replace.
  Control("POST", "/reset");
  HookedSwitch hooked(*client);
  NatReconciler a{*ds, hooked};
  hooked.before_replace = [&] {
    AddNatEntry(*ds, 3);
    ASSERT_TRUE(nat.Sync());  // server B's attach pushes its change
  };
  auto repaired = a.Repair();
  EXPECT_FALSE(repaired) << "replaced over a change synced meanwhile";
  auto held = sim->Nat();
  EXPECT_TRUE(std::any_of(held.entries.begin(), held.entries.end(), [](const auto& e) {
    return e.external_ip == *IpAddr::Parse("10.0.0.3");
  })) << held.ToJson().dump();
  EXPECT_EQ(held.generation, 3);
  repaired = a.Repair();
  ASSERT_TRUE(repaired) << repaired.error().message();
  // B's Sync found the switch agent restarted (another run: its changes were refused) and
  // reloaded the whole table, B's change included: nothing is left to repair.
  EXPECT_FALSE(*repaired);
  EXPECT_EQ(sim->Nat(), Desired());
}

// A switch that lost one entry of 1,000 behind the control plane's back is repaired by sending
// the bucket of that entry, not the table.
TEST_F(NatReconcilerOnSwitchTest, ARepairSendsOnlyTheBucketThatDiffers) {
  for (int n = 1; n <= 1000; ++n) AddNatEntry(*ds, n);
  ASSERT_TRUE(nat.Sync());
  agents::NatTable drifted = Desired();
  const agents::NatEntry lost = drifted.entries[500];
  drifted.entries.erase(drifted.entries.begin() + 500);
  ASSERT_TRUE(client->ReplaceAllIf(drifted, drifted.generation).value());

  HookedSwitch hooked(*client);
  NatReconciler a{*ds, hooked};
  auto repaired = a.Repair();
  ASSERT_TRUE(repaired) << repaired.error().message();
  EXPECT_TRUE(*repaired);
  EXPECT_EQ(sim->Nat(), Desired());
  ASSERT_EQ(hooked.repairs_sent.size(), 1u);
  auto sent = agents::NatBucketsRepair::FromJson(nlohmann::json::parse(hooked.repairs_sent[0]));
  ASSERT_TRUE(sent) << sent.error().message();
  EXPECT_EQ(sent->count, NatBucketCount(999));  // the switch's 999: a new server knows no more
  EXPECT_EQ(sent->buckets, std::vector<uint32_t>{agents::NatEntryBucket(lost, sent->count)});
  EXPECT_LT(sent->entries.size(), 100u);
  EXPECT_EQ(std::count(sent->entries.begin(), sent->entries.end(), lost), 1);
  const SwitchNatStatus status = a.SwitchStatuses().at(0);
  EXPECT_EQ(status.repaired_missing, 1);
  EXPECT_EQ(status.repaired_extra + status.repaired_wrong, 0);
  EXPECT_FALSE(a.Repair().value()) << "nothing left to repair";
}

// Two servers repair one switch at the same generation G: B judged the datastore at G, A at
// G+1 after a commit that adds exactly the stray entry the switch holds, so A finds nothing
// differing and only relabels the switch G+1. B's repair lands first and takes the stray entry
// away without changing the generation; A's must then be refused (its unchanged buckets were
// judged on what B replaced), or the switch would claim G+1 without G+1's entry and no Sync
// would ever send it (found by review).
TEST_F(NatReconcilerOnSwitchTest, ARepairJudgedOnATableAnotherRepairChangedIsRefused) {
  for (int n = 1; n <= 100; ++n) AddNatEntry(*ds, n);
  ASSERT_TRUE(nat.Sync());
  agents::NatTable next;  // the table at version 101, as the datastore will have it
  {
    TempDatastore other;
    for (int n = 1; n <= 101; ++n) AddNatEntry(*other, n);
    next = testing::DesiredTable(*other);
  }
  ASSERT_TRUE(client->ReplaceAllIf(agents::NatTable{100, next.entries}, 100).value());

  std::binary_semaphore b_judged{0}, a_judged{0}, b_repaired{0};
  HookedSwitch b_switch(*client), a_switch(*client);
  NatReconciler b{*ds, b_switch}, a{*ds, a_switch};
  b_switch.before_replace = [&] {
    b_judged.release();
    a_judged.acquire();
  };
  a_switch.before_replace = [&] {
    a_judged.release();
    b_repaired.acquire();
  };
  auto b_done = std::async(std::launch::async, [&] {
    auto r = b.Repair();
    b_repaired.release();
    return r;
  });
  b_judged.acquire();
  AddNatEntry(*ds, 101);  // committed; its Sync has not reached the switch
  auto a_result = a.Repair();
  auto b_result = b_done.get();
  ASSERT_TRUE(b_result) << b_result.error().message();
  EXPECT_TRUE(*b_result);
  ASSERT_FALSE(a_result) << "relabelled a table another repair had changed";
  EXPECT_NE(a_result.error().message().find("changed during the repair"), std::string::npos)
      << a_result.error().message();
  EXPECT_EQ(sim->Nat().generation, 100);
  ASSERT_TRUE(nat.Sync());
  EXPECT_EQ(sim->Nat(), Desired());
}

// The server's background reconciler (Sync, then Repair, every period) restores a reset switch
// without any request touching NAT.
TEST_F(NatReconcilerOnSwitchTest, TheBackgroundReconcilerRestoresASwitchThatLostItsState) {
  for (int n = 1; n <= 3; ++n) AddNatEntry(*ds, n);
  ASSERT_TRUE(nat.Sync());
  Control("POST", "/reset");
  nat.StartBackground(20);
  EXPECT_TRUE(fp::testing::WaitFor([&] { return sim->Nat() == Desired(); }))
      << "the switch holds " << sim->Nat().ToJson().dump();
  nat.StopBackground();
  EXPECT_EQ(sim->Nat().entries.size(), 3u);
}

// A switch that does not answer is called once: the callers right after (a request retried at
// once, the best-effort sync of an undo) get the same timeout at once instead of waiting out
// another; after as long again, the reconciler calls the switch again.
TEST_F(NatReconcilerOnSwitchTest, AfterATimeoutTheSwitchIsNotCalledAgainForAsLongAgain) {
  constexpr auto kTimeout = std::chrono::milliseconds(200);
  std::unique_ptr<agents::SwitchAgentClient> impatient =
      agents::MakeSwitchAgentClient(sim->base_url(), static_cast<int>(kTimeout.count()));
  NatReconciler reconciler(*ds, *impatient);
  AddNatEntry(*ds, 1);
  Control("POST", "/faults", R"({"endpoint": "*", "hang": true})");

  Status timed_out = reconciler.Sync();
  ASSERT_FALSE(timed_out);
  EXPECT_TRUE(http::IsTimeout(timed_out.error())) << timed_out.error().message();
  EXPECT_EQ(sim->faults().held_calls(), 1);
  auto began = std::chrono::steady_clock::now();
  Status again = reconciler.Sync();
  auto repair = reconciler.Repair();
  EXPECT_LT(std::chrono::steady_clock::now() - began, kTimeout / 2);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().message(), timed_out.error().message());
  ASSERT_FALSE(repair);
  EXPECT_EQ(repair.error().message(), timed_out.error().message());
  EXPECT_EQ(sim->faults().held_calls(), 1) << "the hung switch was called again";

  Control("DELETE", "/faults");
  EXPECT_TRUE(fp::testing::WaitFor([&] { return reconciler.Sync().has_value(); }));
  EXPECT_EQ(sim->Nat(), Desired());
}

}  // namespace
}  // namespace fp::loops

namespace fp::loops {
namespace {

// With two switches, a Sync reads the NAT feed once for both (issue 26: each switch read its
// own, a read per switch per attach and detach); a switch behind the shared read's start reads
// its own and catches up all the same.
TEST(NatReconcilerOnTwoSwitchesTest, ASyncReadsTheFeedOnceForBothSwitches) {
  TempDatastore ds;
  auto sim0 = agents::daemon::SwitchAgentDaemon::Start({}).value();
  auto sim1 = agents::daemon::SwitchAgentDaemon::Start({}).value();
  NatReconciler nat(*ds);
  nat.AddSwitch(agents::MakeSwitchAgentClient(sim0->base_url(), 2000));
  nat.AddSwitch(agents::MakeSwitchAgentClient(sim1->base_url(), 2000));
  AddNatEntry(*ds, 1);
  ASSERT_TRUE(nat.Sync());  // both asked where they are, and answered
  for (int n = 2; n <= 4; ++n) {
    AddNatEntry(*ds, n);
    const int64_t reads = ds->read_transactions();
    ASSERT_TRUE(nat.Sync());
    EXPECT_EQ(ds->read_transactions() - reads, 1) << "change " << n;
  }
  EXPECT_EQ(sim0->Nat(), testing::DesiredTable(*ds));
  EXPECT_EQ(sim1->Nat(), testing::DesiredTable(*ds));

  // Switch 1 loses its table at the same generation's numbering (a reset): it is behind the
  // shared read, which starts at the lowest answered position; the next Sync finds out, and
  // the reconciler brings it back whole.
  http::HttpClient control("switch agent", sim1->base_url(), std::chrono::milliseconds(2000));
  ASSERT_EQ(control.Call("POST", "/reset").value().status, 200);
  AddNatEntry(*ds, 5);
  (void)nat.Sync();
  ASSERT_TRUE(nat.Sync());
  EXPECT_EQ(sim0->Nat(), testing::DesiredTable(*ds));
  EXPECT_EQ(sim1->Nat(), testing::DesiredTable(*ds));
}

}  // namespace
}  // namespace fp::loops
