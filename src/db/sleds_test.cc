// Sled registration (db/sleds.h): a sled is who its agent says it is, not where it answers.

#include "db/sleds.h"

#include <gtest/gtest.h>

#include "common/testing/manual_clock.h"
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

}  // namespace
}  // namespace fp::db
