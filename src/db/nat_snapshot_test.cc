// A whole NAT table is read a page at a time (NatReadSnapshotEach): every live row once, in key
// order, with page boundaries falling between port ranges of one address.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>
#include <vector>

#include "db/nat.h"
#include "db/testing/temp_datastore.h"

namespace fp::db {
namespace {

using testing::TempDatastore;

TEST(NatSnapshot, AWholeTableIsReadInPagesInKeyOrderEachLiveRowOnce) {
  TempDatastore ds;
  // 3,001 addresses with three port ranges each: 9,003 rows, more than two pages of 4,096, and
  // every page boundary falls inside one address's ranges. Every 97th row is removed.
  using Key = std::tuple<uint128, int, int>;
  std::vector<Key> live;
  int64_t version = 0;
  ASSERT_TRUE(ds->Write([&](Tx& tx) -> Status {
    for (int a = 3000; a >= 0; --a) {  // inserted out of key order
      for (int r = 0; r < 3; ++r) {
        ++version;
        IpAddr ip(IpVersion::kV4, (uint128{100} << 24) | uint128(static_cast<uint32_t>(a)));
        const bool removed = version % 97 == 0;
        FP_TRY(tx.Exec(
            "INSERT INTO nat_entry (id, external_ip, first_port, last_port, sled_address, vni, "
            "mac, instance_id, version_added, version_removed, time_created) VALUES (?, ?, ?, ?, "
            "?, 10, 'a8:40:25:00:00:01', ?, ?, ?, 1)",
            Uuid::Random(), ip, r * 16384, r * 16384 + 16383, IpAddr(*IpAddr::Parse("fd00::1")),
            Uuid::Random(), version,
            removed ? std::optional<int64_t>(version + 100000) : std::optional<int64_t>()));
        if (!removed) live.emplace_back(ip.value(), r * 16384, r * 16384 + 16383);
      }
    }
    FP_TRY(
        tx.Exec("INSERT INTO counter (name, value) VALUES ('nat_version', ?) ON CONFLICT "
                "(name) DO UPDATE SET value = excluded.value",
                version));
    return Ok();
  }));
  std::sort(live.begin(), live.end());

  std::vector<Key> read;
  auto at = NatReadSnapshotEach(*ds, [&](NatEntry&& e) -> Status {
    read.emplace_back(e.external_ip.value(), e.first_port, e.last_port);
    return Ok();
  });
  ASSERT_TRUE(at) << at.error().message();
  EXPECT_EQ(*at, version);
  EXPECT_EQ(read.size(), live.size());
  EXPECT_EQ(read, live);

  // An error from the visitor ends the read and is the read's.
  int seen = 0;
  auto stopped = NatReadSnapshotEach(*ds, [&](NatEntry&&) -> Status {
    if (++seen == 5000) return Fail(Error::Internal("enough"));
    return Ok();
  });
  ASSERT_FALSE(stopped);
  EXPECT_EQ(stopped.error().message(), "enough");
  EXPECT_EQ(seen, 5000);
}

}  // namespace
}  // namespace fp::db
