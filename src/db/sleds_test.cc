// Sled registration (db/sleds.h): a sled is who its agent says it is, not where it answers.

#include "db/sleds.h"

#include <gtest/gtest.h>

#include "common/testing/manual_clock.h"
#include "db/testing/statement_trace.h"
#include "db/testing/temp_datastore.h"

namespace fp::db {
namespace {

using fp::testing::ManualClock;
using testing::TempDatastore;

class SledUpsertTest : public ::testing::Test {
 protected:
  Sled Upsert(const std::optional<std::string>& serial, const std::string& url) {
    clock->Advance(1'000'000);  // each registration later than the last
    auto sled = SledUpsert(*ds, serial, url, IpAddr::Parse("fd00::1").value());
    EXPECT_TRUE(sled) << sled.error().message();
    return sled.value();
  }
  size_t Count() { return SledList(*ds).value().size(); }

  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>();
  TempDatastore ds{clock};
};

TEST_F(SledUpsertTest, AnAgentBackOnAnotherUrlWithItsSerialIsTheSameSled) {
  Sled first = Upsert("BRM0001", "http://127.0.0.1:7001");
  Sled again = Upsert("BRM0001", "http://127.0.0.1:7002");
  EXPECT_EQ(again.id, first.id);
  EXPECT_EQ(again.serial, "BRM0001");
  EXPECT_EQ(again.agent_url, "http://127.0.0.1:7002");
  // Another serial at the old URL is another sled.
  Sled other = Upsert("BRM0002", "http://127.0.0.1:7001");
  EXPECT_NE(other.id, first.id);
  EXPECT_EQ(Count(), 2u);
}

TEST_F(SledUpsertTest, ASledNamedByItsUrlTakesTheSerialItsAgentNowSays) {
  Sled by_url = Upsert(std::nullopt, "http://127.0.0.1:7001");
  EXPECT_EQ(by_url.serial, "http://127.0.0.1:7001");
  Sled named = Upsert("BRM0001", "http://127.0.0.1:7001");
  EXPECT_EQ(named.id, by_url.id);
  EXPECT_EQ(named.serial, "BRM0001");
  EXPECT_EQ(Count(), 1u);
}

TEST_F(SledUpsertTest, AnAgentThatDoesNotSayItsSerialIsTheSledLastSeenAtItsUrl) {
  Sled moved = Upsert("BRM0001", "http://127.0.0.1:7001");
  Upsert("BRM0001", "http://127.0.0.1:7002");
  Sled newer = Upsert("BRM0002", "http://127.0.0.1:7001");
  // Both sleds were at :7001; the one registered there last is meant.
  Sled unnamed = Upsert(std::nullopt, "http://127.0.0.1:7001");
  EXPECT_EQ(unnamed.id, newer.id);
  EXPECT_NE(unnamed.id, moved.id);
  Sled fresh = Upsert(std::nullopt, "http://127.0.0.1:7003");
  EXPECT_EQ(fresh.serial, "http://127.0.0.1:7003");
  EXPECT_EQ(Count(), 3u);
}

// Placement (PickSledIn): the sled in service whose agent answers with the fewest running
// instances. Rows are written directly, in the states a rack's instances reach.
class PlacementTest : public SledUpsertTest {
 protected:
  void AddInstance(TempDatastore& on, const Project& project, const Sled* sled,
                   const std::string& state, bool deleted = false) {
    ASSERT_TRUE(on->Write<bool>([&](Tx& tx) -> Result<bool> {
      std::optional<std::string> sled_id;
      if (sled) sled_id = sled->id.ToString();
      std::optional<int64_t> time_deleted;
      if (deleted) time_deleted = 1;
      FP_TRY(
          tx.Exec("INSERT INTO instance (id, project_id, name, description, hostname, ncpus, "
                  "memory, state, run_state, sled_id, time_run_state_updated, time_created, "
                  "time_modified, time_deleted) VALUES (?, ?, ?, '', 'h', 1, 1073741824, ?, "
                  "'running', ?, 0, 0, 0, ?)",
                  Uuid::Random(), project.id, "vm-" + std::to_string(++instances_), state, sled_id,
                  time_deleted));
      return true;
    }));
  }
  Result<Uuid> Pick(TempDatastore& on, const std::vector<Uuid>& candidates) {
    return on->Read<Uuid>([&](Tx& tx) { return PickSledIn(tx, candidates); });
  }
  int instances_ = 0;
};

TEST_F(PlacementTest, TheSledWithTheFewestRunningInstancesIsChosen) {
  testing::Fixture f = testing::MakeFixture(*ds, "10.0.0.0", "10.0.0.15");
  Sled busy = Upsert("BRM0001", "http://127.0.0.1:7001");
  Sled quiet = Upsert("BRM0002", "http://127.0.0.1:7002");
  AddInstance(ds, f.project, &busy, "vmm");
  AddInstance(ds, f.project, &busy, "vmm");
  // On the quiet sled: one running, and what does not run there (a failed VMM that kept its
  // sled, instances deleted since) is not counted.
  AddInstance(ds, f.project, &quiet, "vmm");
  AddInstance(ds, f.project, &quiet, "failed");
  AddInstance(ds, f.project, &quiet, "failed");
  AddInstance(ds, f.project, &quiet, "vmm", /*deleted=*/true);
  AddInstance(ds, f.project, &quiet, "vmm", /*deleted=*/true);
  EXPECT_EQ(Pick(ds, {busy.id, quiet.id}).value(), quiet.id);
  // Only candidates count: the agents this server holds.
  EXPECT_EQ(Pick(ds, {busy.id}).value(), busy.id);
  AddInstance(ds, f.project, &quiet, "vmm");
  AddInstance(ds, f.project, &quiet, "vmm");
  EXPECT_EQ(Pick(ds, {busy.id, quiet.id}).value(), busy.id);
}

// At rack scale the count is every running instance of the rack, in the write lane on SQLite:
// it reads instance_by_sled by sled and state (schema 17), not every live instance's row.
TEST_F(PlacementTest, TheCountOfEachSledReadsTheIndexBySledAndState) {
  testing::StatementTrace trace;
  TempDatastore traced{clock, {}, testing::TestEngine::kSqlite};
  testing::Fixture f = testing::MakeFixture(*traced, "10.0.0.0", "10.0.0.15");
  auto sled =
      SledUpsert(*traced, "BRM0001", "http://127.0.0.1:7001", IpAddr::Parse("fd00::1").value());
  ASSERT_TRUE(sled) << sled.error().message();
  AddInstance(traced, f.project, &*sled, "vmm");
  ASSERT_EQ(Pick(traced, {sled->id}).value(), sled->id);
  std::string plan =
      testing::QueryPlan(*traced, trace.Only("count(*) FROM instance WHERE sled_id"));
  EXPECT_NE(plan.find("INDEX instance_by_sled (sled_id=? AND state=?)"), std::string::npos) << plan;
}

}  // namespace
}  // namespace fp::db
