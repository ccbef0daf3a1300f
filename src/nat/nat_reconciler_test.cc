// NatReconciler::Sync: a caller returns only after an exchange that covers its commits (never
// on the strength of one already in flight when it committed), concurrent callers do not cost
// an exchange each, and a failed exchange fails only the caller it was for.

#include "nat/nat_reconciler.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "db/testing/temp_datastore.h"

namespace fp::nat {
namespace {

using db::testing::TempDatastore;

// A switch that records what it was sent; the first ApplyChanges can be held until released.
class FakeSwitch : public agents::SwitchAgentClient {
 public:
  Result<agents::NatTable> GetNat() override {
    std::lock_guard lock(mu_);
    return agents::NatTable{generation_, {}};
  }
  Result<int64_t> ApplyChanges(const std::vector<agents::NatChange>& changes) override {
    std::unique_lock lock(mu_);
    ++apply_calls_;
    if (hold_first_ && apply_calls_ == 1) {
      held_ = true;
      cv_.notify_all();
      cv_.wait(lock, [&] { return released_; });
    }
    if (fail_first_ && apply_calls_ == 1) {
      return Fail(Error::Unavailable("switch agent at fake refused the change"));
    }
    for (const auto& c : changes) generation_ = std::max(generation_, c.gen);
    return generation_;
  }
  Result<int64_t> ReplaceAll(const agents::NatTable& table) override {
    std::lock_guard lock(mu_);
    generation_ = table.generation;
    return generation_;
  }
  const std::string& address() const override { return address_; }

  void HoldFirstApply() {
    std::lock_guard lock(mu_);
    hold_first_ = true;
  }
  void WaitUntilHeld() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return held_; });
  }
  void Release(bool fail_first) {
    std::lock_guard lock(mu_);
    released_ = true;
    fail_first_ = fail_first;
    cv_.notify_all();
  }
  int apply_calls() {
    std::lock_guard lock(mu_);
    return apply_calls_;
  }
  int64_t generation() {
    std::lock_guard lock(mu_);
    return generation_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t generation_ = 0;
  int apply_calls_ = 0;
  bool hold_first_ = false;
  bool held_ = false;
  bool released_ = false;
  bool fail_first_ = false;
  std::string address_ = "fake";
};

class NatReconcilerTest : public ::testing::Test {
 protected:
  void ExpectSyncOk() {
    Status s = nat.Sync();
    EXPECT_TRUE(s) << s.error().message();
  }

  // Commits one NAT entry (the next version) as the attach sagas do.
  void AddEntry() {
    int n = ++entries_;
    auto added = ds->Write<bool>([&](db::Tx& tx) -> Result<bool> {
      FP_TRY(
          tx.Exec("INSERT INTO counter (name, value) VALUES ('nat_version', 1) "
                  "ON CONFLICT (name) DO UPDATE SET value = value + 1"));
      FP_TRY(tx.Exec(
          "INSERT INTO nat_entry (id, external_ip, first_port, last_port, sled_address, vni, "
          "mac, instance_id, version_added, time_created) VALUES (?, ?, 0, 65535, ?, 10, "
          "'a8:40:25:00:00:01', ?, (SELECT value FROM counter WHERE name = 'nat_version'), 1)",
          Uuid::Random(), IpAddr(*IpAddr::Parse(fmt::format("10.0.0.{}", n))),
          IpAddr(*IpAddr::Parse("fd00::1")), Uuid::Random()));
      return true;
    });
    ASSERT_TRUE(added) << added.error().message();
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
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // None of them may return on the strength of the exchange that began before their commit.
  EXPECT_EQ(returned.load(), 0);
  sw.Release(false);
  first.join();
  for (auto& t : later) t.join();
  EXPECT_EQ(sw.generation(), 9);  // every caller's change reached the switch
  // One exchange for the first caller, then one (or, if a caller was slow to arrive, a few)
  // for the eight: not one each.
  EXPECT_LE(sw.apply_calls(), 4);
}

TEST_F(NatReconcilerTest, AFailedExchangeFailsOnlyTheCallersItCovered) {
  AddEntry();
  sw.HoldFirstApply();
  std::thread first([&] { EXPECT_FALSE(nat.Sync()); });
  sw.WaitUntilHeld();
  AddEntry();
  std::thread second([&] { ExpectSyncOk(); });  // arrives during the failing exchange
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  sw.Release(/*fail_first=*/true);
  first.join();
  // The second caller's commit was not covered by the failed exchange: it ran one of its own.
  second.join();
  EXPECT_EQ(sw.generation(), 2);
}

}  // namespace
}  // namespace fp::nat
