#include "db/nat.h"

#include <fmt/format.h>

#include <functional>
#include <memory>
#include <optional>
#include <tuple>

#include "db/counters.h"
#include "db/external_ips.h"
#include "db/instances.h"

namespace fp::db {

namespace {

constexpr std::string_view kNatColumns =
    "id, external_ip, first_port, last_port, sled_address, vni, mac, instance_id, version_added, "
    "version_removed";

Result<NatEntry> NatFromRow(const Row& r) {
  NatEntry n;
  n.id = FP_TRY(UuidColumn(r, 0));
  n.external_ip = FP_TRY(IpColumn(r, 1));
  n.first_port = static_cast<int>(r.Int(2));
  n.last_port = static_cast<int>(r.Int(3));
  n.sled_address = FP_TRY(IpColumn(r, 4));
  n.vni = r.Int(5);
  n.mac = r.Text(6);
  n.instance_id = FP_TRY(UuidColumn(r, 7));
  n.version_added = r.Int(8);
  if (!r.IsNull(9)) n.version_removed = r.Int(9);
  return n;
}

// PostgreSQL's turn for NAT versions: the lock, held to the end of the transaction, that every
// transaction taking a version takes first (NatNextVersionIn).
constexpr std::string_view kNatTurn = "LOCK TABLE nat_version_turn IN EXCLUSIVE MODE";

// The current NAT version as a PostgreSQL expression: the highest version a row carries, or
// the floor that garbage collection left when it deleted rows above the rest.
constexpr std::string_view kPgCurrentVersion =
    "greatest(coalesce((SELECT max(version_added) FROM nat_entry), 0), "
    "coalesce((SELECT max(version_removed) FROM nat_entry), 0), "
    "coalesce((SELECT value FROM counter WHERE name = 'nat_version'), 0))";

Status NatRemoveRowIn(Tx& tx, const Uuid& id) {
  int64_t version = FP_TRY(NatNextVersionIn(tx));
  return tx.ExecLater(
      "UPDATE nat_entry SET version_removed = ?, time_deleted = ? WHERE id = ? AND "
      "version_removed IS NULL",
      version, tx.now(), id);
}

}  // namespace

Result<int64_t> NatNextVersionIn(Tx& tx) {
  if (!tx.postgres()) return CounterNextIn(tx, "nat_version", 1);
  FP_CHECK_OK(tx.ExecLater(kNatTurn));  // goes with the statement below: one exchange
  auto row = FP_TRY(tx.QueryRow("SELECT nextval('nat_version_seq')"));
  if (!row) return Fail(Error::Internal("nextval('nat_version_seq') returned no row"));
  return row->Int(0);
}

Result<std::vector<NatEntry>> NatEnsureForIpIn(Tx& tx, const ExternalIp& e, const Uuid& instance_id,
                                               const Sled& sled, const NetworkInterface* known) {
  std::vector<NatEntry> out;
  std::optional<NetworkInterface> nic;
  if (known != nullptr) {
    if (known->instance_id != instance_id) {
      return Fail(
          Error::Internal(fmt::format("NAT for instance {} from the NIC of instance {}",
                                      instance_id.ToString(), known->instance_id.ToString())));
    }
    nic = *known;
  } else {
    nic = FP_TRY(PrimaryNicIn(tx, instance_id));
  }
  if (!nic) return out;
  auto live = FP_TRY(tx.QueryRow(
      fmt::format("SELECT {} FROM nat_entry WHERE external_ip = ? AND first_port = ? AND "
                  "last_port = ? AND version_removed IS NULL",
                  kNatColumns),
      e.ip, e.first_port, e.last_port));
  if (live) {
    NatEntry row = FP_TRY(NatFromRow(*live));
    if (row.sled_address == sled.underlay_address && row.vni == nic->vni && row.mac == nic->mac &&
        row.instance_id == instance_id) {
      out.push_back(row);
      return out;
    }
    // A leftover mapping for this address (another sled, or an instance since deleted).
    FP_CHECK_OK(NatRemoveRowIn(tx, row.id));
  }
  NatEntry row;
  // Time-ordered: the id's unique index grows at its end, so the entries a group commit adds
  // share its last page instead of dirtying a random leaf each.
  row.id = tx.NewTimeOrderedId();
  row.external_ip = e.ip;
  row.first_port = e.first_port;
  row.last_port = e.last_port;
  row.sled_address = sled.underlay_address;
  row.vni = nic->vni;
  row.mac = nic->mac;
  row.instance_id = instance_id;
  row.version_added = FP_TRY(NatNextVersionIn(tx));
  FP_CHECK_OK(tx.ExecLater(
      "INSERT INTO nat_entry (id, external_ip, first_port, last_port, sled_address, vni, mac, "
      "instance_id, version_added, time_created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
      row.id, row.external_ip, row.first_port, row.last_port, row.sled_address, row.vni, row.mac,
      instance_id, row.version_added, tx.now()));
  out.push_back(row);
  return out;
}

namespace {

// PostgreSQL's forms of the NAT changes above, each one statement a transaction can hold back
// (after the turn's lock, kNatTurn): the next version taken only when a row changes.
constexpr std::string_view kNatVersionOfEach =
    "v AS (SELECT nextval('nat_version_seq') AS value FROM {})";
constexpr std::string_view kPrimaryNic =
    "nic AS (SELECT n.mac, v.vni FROM network_interface n JOIN vpc v ON v.id = n.vpc_id WHERE "
    "n.instance_id = ? AND n.is_primary = 1 AND n.time_deleted IS NULL)";
// Parameters: address, first port, last port, now.
const std::string& RemoveForIpOnPostgres() {
  static const std::string kSql = fmt::format(
      "WITH live AS (SELECT id FROM nat_entry WHERE external_ip = ? AND first_port = ? AND "
      "last_port = ? AND version_removed IS NULL), {} "
      "UPDATE nat_entry SET version_removed = v.value, time_deleted = ? FROM v WHERE "
      "nat_entry.id IN (SELECT id FROM live)",
      fmt::format(kNatVersionOfEach, "live"));
  return kSql;
}
// The live row of an address that points elsewhere than (sled, the instance's primary NIC),
// removed when the instance has one. Parameters: instance, address, first port, last port,
// sled address, instance, now.
const std::string& RemoveLeftoverOnPostgres() {
  static const std::string kSql = fmt::format(
      "WITH {}, live AS (SELECT l.id FROM nat_entry l, nic WHERE l.external_ip = ? AND "
      "l.first_port = ? AND l.last_port = ? AND l.version_removed IS NULL AND NOT "
      "(l.sled_address = ? AND l.vni = nic.vni AND l.mac = nic.mac AND l.instance_id = ?)), {} "
      "UPDATE nat_entry SET version_removed = v.value, time_deleted = ? FROM v WHERE "
      "nat_entry.id IN (SELECT id FROM live)",
      kPrimaryNic, fmt::format(kNatVersionOfEach, "live"));
  return kSql;
}
// The row, unless the address has a live one (after RemoveLeftoverOnPostgres: the right one).
// Parameters: instance, address, first port, last port, id, address, first port, last port,
// sled address, instance, now.
const std::string& AddOnPostgres() {
  static const std::string kSql = fmt::format(
      "WITH {}, todo AS (SELECT 1 FROM nic WHERE NOT EXISTS (SELECT 1 FROM nat_entry WHERE "
      "external_ip = ? AND first_port = ? AND last_port = ? AND version_removed IS NULL)), {} "
      "INSERT INTO nat_entry (id, external_ip, first_port, last_port, sled_address, vni, mac, "
      "instance_id, version_added, time_created) SELECT ?, ?, ?, ?, ?, nic.vni, nic.mac, ?, "
      "v.value, ? FROM nic, v",
      kPrimaryNic, fmt::format(kNatVersionOfEach, "todo"));
  return kSql;
}

}  // namespace

Status NatEnsureForIpLaterIn(Tx& tx, const ExternalIp& e, const Uuid& instance_id, const Sled& sled,
                             const NetworkInterface* nic) {
  if (!tx.postgres()) {
    FP_TRY(NatEnsureForIpIn(tx, e, instance_id, sled, nic));
    return Ok();
  }
  FP_CHECK_OK(tx.ExecLater(kNatTurn));
  FP_CHECK_OK(tx.ExecLater(RemoveLeftoverOnPostgres(), instance_id, e.ip, e.first_port, e.last_port,
                           sled.underlay_address, instance_id, tx.now()));
  return tx.ExecLater(AddOnPostgres(), instance_id, e.ip, e.first_port, e.last_port,
                      tx.NewTimeOrderedId(), e.ip, e.first_port, e.last_port, sled.underlay_address,
                      instance_id, tx.now());
}

Status NatRemoveForIpIn(Tx& tx, const ExternalIp& e) {
  if (tx.postgres()) {
    FP_CHECK_OK(tx.ExecLater(kNatTurn));
    return tx.ExecLater(RemoveForIpOnPostgres(), e.ip, e.first_port, e.last_port, tx.now());
  }
  for (const Row& r : FP_TRY(tx.Query(
           "SELECT id FROM nat_entry WHERE external_ip = ? AND first_port = ? AND last_port = ? "
           "AND version_removed IS NULL",
           e.ip, e.first_port, e.last_port))) {
    FP_CHECK_OK(NatRemoveRowIn(tx, FP_TRY(UuidColumn(r, 0))));
  }
  return Ok();
}

Result<size_t> NatEnsureForInstanceIn(Tx& tx, const Uuid& instance_id, const Sled& sled) {
  const std::vector<ExternalIp> ips = FP_TRY(InstanceExternalIpsIn(tx, instance_id));
  for (const ExternalIp& e : ips) {
    if (e.state != AttachState::kAttached) {
      return Fail(Error::Unavailable(fmt::format(
          "cannot program NAT for instance {}: external IP {} is {}; retry when that operation "
          "completes",
          instance_id.ToString(), e.ip.ToString(), ToString(e.state))));
    }
  }
  if (tx.postgres()) {
    // Each address's statements held back (NatEnsureForIpLaterIn): the turn is taken in the
    // transaction's last exchange, not held across the reads above. An instance without a
    // primary NIC gets no rows (the statements find no NIC), as NatEnsureForIpIn's none.
    if (ips.empty() || !FP_TRY(PrimaryNicIn(tx, instance_id))) return size_t{0};
    for (const ExternalIp& e : ips) FP_CHECK_OK(NatEnsureForIpLaterIn(tx, e, instance_id, sled));
    return ips.size();
  }
  size_t rows = 0;
  for (const ExternalIp& e : ips) rows += FP_TRY(NatEnsureForIpIn(tx, e, instance_id, sled)).size();
  return rows;
}

namespace {

// Every live row of an instance, each at a version of its own, in the order they were added.
// Parameters: instance, now.
constexpr std::string_view kRemoveForInstanceOnPostgres =
    "WITH live AS (SELECT id, nextval('nat_version_seq') AS v FROM (SELECT id FROM nat_entry "
    "WHERE instance_id = ? AND version_removed IS NULL ORDER BY version_added) l) "
    "UPDATE nat_entry SET version_removed = live.v, time_deleted = ? FROM live WHERE "
    "nat_entry.id = live.id";

}  // namespace

Status NatRemoveForInstanceIn(Tx& tx, const Uuid& instance_id) {
  if (tx.postgres()) {
    FP_CHECK_OK(tx.ExecLater(kNatTurn));
    return tx.ExecLater(kRemoveForInstanceOnPostgres, instance_id, tx.now());
  }
  for (const Row& r : FP_TRY(tx.Query(
           "SELECT id FROM nat_entry WHERE instance_id = ? AND version_removed IS NULL ORDER BY "
           "version_added",
           instance_id))) {
    FP_CHECK_OK(NatRemoveRowIn(tx, FP_TRY(UuidColumn(r, 0))));
  }
  return Ok();
}

namespace {

// The feed on PostgreSQL: one statement, one round trip: the version, then each change beside
// it (none: one row of NULLs beside it). Each half is ordered and limited along its own index,
// so that a walk of each index from `after` is the cheap plan, with statistics or without
// (both checked). As one union ordered as a whole (SQLite's kChanges below), planned once for
// any `after` (a prepared statement's generic plan) on a table not yet analysed, it read every
// removed row in a sequential scan (0.70 ms and 132 buffers a read in a benchmark, 2026-12-05)
// and held a predicate lock on the whole table. Parameters: after, limit, after, limit, limit.
const std::string& VersionAndChanges() {
  static const std::string kSql = fmt::format(
      "SELECT c.value, x.* FROM (SELECT {1} AS value) c LEFT JOIN (SELECT * FROM ("
      "(SELECT {0}, version_added AS v, 0 AS removed FROM nat_entry WHERE "
      "version_removed IS NULL AND version_added > ? ORDER BY version_added LIMIT ?) "
      "UNION ALL (SELECT {0}, version_removed AS v, 1 FROM nat_entry WHERE "
      "version_removed > ? ORDER BY version_removed LIMIT ?)) u ORDER BY v LIMIT ?) x ON "
      "true ORDER BY x.v",
      kNatColumns, kPgCurrentVersion);
  return kSql;
}

Result<NatFeed> FeedOfRows(const std::vector<Row>& rows) {
  NatFeed out;
  for (const Row& r : rows) {
    out.current_version = r.Int(0);
    if (r.IsNull(1)) break;
    const Row change = r.Slice(1, 12);
    out.changes.push_back(
        NatFeedChange{FP_TRY(NatFromRow(change)), change.Int(10), change.Int(11) != 0});
  }
  return out;
}

// `last`: the read is the transaction's last statement (Tx::QueryLast), on PostgreSQL.
Result<NatFeed> NatChangesSinceIn(Tx& tx, int64_t after, int64_t limit, bool last) {
  NatFeed out;
  if (tx.postgres()) {
    return FeedOfRows(
        FP_TRY(last ? tx.QueryLast(VersionAndChanges(), after, limit, after, limit, limit)
                    : tx.Query(VersionAndChanges(), after, limit, after, limit, limit)));
  }
  static const std::string kChanges = fmt::format(
      "SELECT {0}, version_added AS v, 0 AS removed FROM nat_entry WHERE "
      "version_removed IS NULL AND version_added > ? "
      "UNION ALL SELECT {0}, version_removed AS v, 1 FROM nat_entry WHERE "
      "version_removed > ? ORDER BY v LIMIT ?",
      kNatColumns);
  auto version = FP_TRY(tx.QueryRow("SELECT value FROM counter WHERE name = 'nat_version'"));
  out.current_version = version ? version->Int(0) : 0;
  if (out.current_version <= after) return out;
  for (const Row& r : FP_TRY(tx.Query(kChanges, after, after, limit))) {
    out.changes.push_back(NatFeedChange{FP_TRY(NatFromRow(r)), r.Int(10), r.Int(11) != 0});
  }
  return out;
}

}  // namespace

Result<NatFeed> NatChangesSinceIn(Tx& tx, int64_t after, int64_t limit) {
  return NatChangesSinceIn(tx, after, limit, false);
}

Status NatChangesAtCommitIn(Tx& tx, int64_t after, int64_t limit,
                            std::function<void(NatFeed)> committed) {
  if (tx.postgres()) {
    // Not in the transaction: its snapshot predates the versions committed before it took its
    // own (under the turn's lock, late), so a read in it could lack a lower one, and reading
    // the versions' last index pages in every change would make concurrent changes fail each
    // other under SERIALIZABLE. Right after its commit instead, in the same exchange: the
    // turn was held to the commit, so every lower version was committed before, and the read's
    // snapshot, taken after it, holds them all.
    auto feed = std::make_shared<std::optional<NatFeed>>();
    FP_CHECK_OK(tx.QueryAfterCommit(
        [feed](std::vector<Row> rows) {
          auto read = FeedOfRows(rows);
          if (read) *feed = std::move(*read);
        },
        VersionAndChanges(), after, limit, after, limit, limit));
    tx.OnOutcome([feed, committed = std::move(committed)](bool ok) {
      if (ok && *feed) committed(std::move(**feed));
    });
    return Ok();
  }
  // SQLite writes one transaction at a time: what it reads now is what it commits, and no
  // other commit comes in between.
  auto feed = std::make_shared<NatFeed>(FP_TRY(NatChangesSinceIn(tx, after, limit, false)));
  tx.OnOutcome([feed, committed = std::move(committed)](bool ok) {
    if (ok) committed(std::move(*feed));
  });
  return Ok();
}

Result<NatFeed> NatChangesSince(Datastore& ds, int64_t after, int64_t limit) {
  // Not waiting for durability: see Datastore::ReadLatest. One round trip on PostgreSQL.
  return ds.ReadLatest<NatFeed>(
      [&](Tx& tx) -> Result<NatFeed> { return NatChangesSinceIn(tx, after, limit, true); });
}

namespace {
Result<int64_t> NatCurrentVersionIn(Tx& tx) {
  static const std::string kOnPostgres = fmt::format("SELECT {}", kPgCurrentVersion);
  auto row = FP_TRY(tx.QueryRow(tx.postgres() ? std::string_view(kOnPostgres)
                                              : "SELECT value FROM counter WHERE name = "
                                                "'nat_version'"));
  return row ? row->Int(0) : 0;
}
}  // namespace

Result<int64_t> NatCurrentVersion(Datastore& ds) { return ds.Read<int64_t>(NatCurrentVersionIn); }

Result<int64_t> NatCollectGarbage(Datastore& ds, int64_t below_version, Timestamp removed_before) {
  return ds.Write<int64_t>([&](Tx& tx) -> Result<int64_t> {
    if (tx.postgres()) {
      // The version is the highest a row carries (kPgCurrentVersion): the floor keeps it from
      // going back when the rows deleted here carried it.
      FP_TRY(tx.Exec(
          "INSERT INTO counter (name, value) SELECT 'nat_version', max(version_removed) FROM "
          "nat_entry WHERE version_removed IS NOT NULL AND version_removed < ? AND "
          "time_deleted < ? HAVING max(version_removed) IS NOT NULL ON CONFLICT (name) DO "
          "UPDATE SET value = greatest(counter.value, excluded.value)",
          below_version, removed_before));
    }
    return tx.Exec(
        "DELETE FROM nat_entry WHERE version_removed IS NOT NULL AND version_removed < ? AND "
        "time_deleted < ?",
        below_version, removed_before);
  });
}

namespace {
// The live rows in key order, a page at a time (keyset: after the last key of the page before,
// along the nat_entry_live index), so that a whole table is never held as rows at once.
Status NatLiveEachIn(Tx& tx, const std::function<Status(NatEntry&&)>& each) {
  constexpr int kPage = 4096;
  const std::string first = fmt::format(
      "SELECT {} FROM nat_entry WHERE version_removed IS NULL ORDER BY external_ip, "
      "first_port, last_port LIMIT {}",
      kNatColumns, kPage);
  const std::string next = fmt::format(
      "SELECT {} FROM nat_entry WHERE version_removed IS NULL AND (external_ip, first_port, "
      "last_port) > (?, ?, ?) ORDER BY external_ip, first_port, last_port LIMIT {}",
      kNatColumns, kPage);
  std::optional<std::tuple<IpAddr, int, int>> after;
  for (;;) {
    std::vector<Row> page =
        after
            ? FP_TRY(tx.Query(next, std::get<0>(*after), std::get<1>(*after), std::get<2>(*after)))
            : FP_TRY(tx.Query(first));
    for (size_t k = 0; k < page.size(); ++k) {
      NatEntry e = FP_TRY(NatFromRow(page[k]));
      if (k + 1 == page.size()) after.emplace(e.external_ip, e.first_port, e.last_port);
      FP_CHECK_OK(each(std::move(e)));
    }
    if (page.size() < static_cast<size_t>(kPage)) return Ok();
  }
}

Result<std::vector<NatEntry>> NatLiveIn(Tx& tx) {
  std::vector<NatEntry> out;
  FP_CHECK_OK(NatLiveEachIn(tx, [&](NatEntry&& e) -> Status {
    out.push_back(std::move(e));
    return Ok();
  }));
  return out;
}
}  // namespace

Result<std::vector<NatEntry>> NatLive(Datastore& ds) {
  return ds.Read<std::vector<NatEntry>>(NatLiveIn);
}

Result<int64_t> NatReadSnapshotEach(Datastore& ds, const std::function<void()>& restart,
                                    const std::function<Status(NatEntry&&)>& each) {
  return NatReadSnapshotTwice(
      ds, restart, each, [](int64_t) -> Result<bool> { return false; },
      [](NatEntry&&) -> Status { return Ok(); });
}

Result<int64_t> NatReadSnapshotTwice(Datastore& ds, const std::function<void()>& restart,
                                     const std::function<Status(NatEntry&&)>& first,
                                     const std::function<Result<bool>(int64_t version)>& between,
                                     const std::function<Status(NatEntry&&)>& second) {
  return ds.ReadLatest<int64_t>([&](Tx& tx) -> Result<int64_t> {
    restart();
    const int64_t version = FP_TRY(NatCurrentVersionIn(tx));
    FP_CHECK_OK(NatLiveEachIn(tx, first));
    if (FP_TRY(between(version))) FP_CHECK_OK(NatLiveEachIn(tx, second));
    return version;
  });
}

Result<NatSnapshot> NatReadSnapshot(Datastore& ds) {
  NatSnapshot out;
  out.version = FP_TRY(NatReadSnapshotEach(
      ds, [&] { out.rows.clear(); },
      [&](NatEntry&& e) -> Status {
        out.rows.push_back(std::move(e));
        return Ok();
      }));
  return out;
}

}  // namespace fp::db
