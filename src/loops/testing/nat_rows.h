#pragma once

// NAT rows for the reconciler's tests: committed as the attach sagas commit them, and the
// table the datastore wants on a switch.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>

#include "db/datastore.h"
#include "db/nat.h"
#include "loops/nat_reconciler.h"

namespace fp::loops::testing {

// Adds NAT entry 10.0.0.<n> (or 10.<n / 65536>.<n / 256 % 256>.<n % 256> past 255) at the
// next version, in `tx`.
inline Status AddNatEntryIn(db::Tx& tx, int n) {
  const int64_t version = FP_TRY(db::NatNextVersionIn(tx));
  FP_TRY(
      tx.Exec("INSERT INTO nat_entry (id, external_ip, first_port, last_port, sled_address, vni, "
              "mac, instance_id, version_added, time_created) VALUES (?, ?, 0, 65535, ?, 10, "
              "'a8:40:25:00:00:01', ?, ?, 1)",
              Uuid::Random(),
              IpAddr(*IpAddr::Parse(fmt::format("10.{}.{}.{}", n / 65536, n / 256 % 256, n % 256))),
              IpAddr(*IpAddr::Parse("fd00::1")), Uuid::Random(), version));
  return Ok();
}

// The same, committed.
inline void AddNatEntry(db::Datastore& ds, int n) {
  Status added = ds.Write([&](db::Tx& tx) { return AddNatEntryIn(tx, n); });
  ASSERT_TRUE(added) << added.error().message();
}

// The table the datastore wants on a switch, at the datastore's NAT version, sorted as the
// simulated switch agent lists it.
inline agents::NatTable DesiredTable(db::Datastore& ds) {
  agents::NatTable t;
  t.generation = db::NatCurrentVersion(ds).value();
  auto rows = db::NatLive(ds);  // named: a range-for over a temporary's value() dangles
  for (const auto& row : rows.value()) t.entries.push_back(ToEntry(row));
  std::sort(t.entries.begin(), t.entries.end(), [](const auto& a, const auto& b) {
    return std::tie(a.external_ip, a.first_port) < std::tie(b.external_ip, b.first_port);
  });
  return t;
}

}  // namespace fp::loops::testing
