// DesiredNat (loops/nat_reconciler.h): the table the datastore wants on every switch, its
// version and digest, followed through the change feed; and ToEntry, a NAT row as a switch
// holds it.

#include <algorithm>
#include <optional>
#include <set>

#include "common/log.h"
#include "loops/nat_reconciler.h"

namespace fp::loops {

namespace {
// Changes read from the feed at a time while following it.
constexpr int64_t kDigestBatch = 5000;
}  // namespace

agents::NatEntry ToEntry(const model::NatEntry& row) {
  return agents::NatEntry{row.external_ip,  row.first_port, row.last_port,
                          row.sled_address, row.vni,        row.mac};
}

// ---- DesiredNat ----

Result<DesiredNat::Point> DesiredNat::Current() {
  MutexLock lock(mu_);
  // Taken before the read: a sync that begins during this one makes the point old (Recent).
  const MonoTime began = ds_.clock().Monotonic();
  const int64_t syncs = syncs_.load();
  read_began_.reset();  // until this read reaches the end of the feed
  for (;;) {
    if (!at_) {
      Point p;
      p.version = FP_TRY(db::NatReadSnapshotEach(
          ds_, [&] { p = Point{}; },
          [&](model::NatEntry&& row) -> Status {
            p.digest += agents::NatEntryHash(ToEntry(row));
            ++p.entries;
            return Ok();
          }));
      at_ = p;
    }
    std::optional<Point> at = FP_TRY(FollowFeed());
    if (!at) {
      // The datastore is behind where the digest stood (restored to an earlier version, or a
      // crash undid commits): what was counted past its version is not in it any more.
      LogEvent("warn", "the datastore's NAT version went back; the desired table is read whole",
               {{"was", at_->version}});
      at_.reset();
      continue;
    }
    at_ = *at;
    last_version_.store(at->version);
    last_entries_.store(at->entries);
    read_began_ = began;
    syncs_at_read_ = syncs;
    return *at;
  }
}

Result<std::optional<DesiredNat::Point>> DesiredNat::FollowFeed() {
  // Where the digest stood, whole: every row live there is counted in it. Followed on a copy,
  // kept only when this call reaches the end of the feed: a read that fails between two pages
  // leaves a position where the digest is not whole (a row live there may be one whose
  // addition no page listed), which must not become the next call's `from`.
  Point at = *at_;
  const int64_t from = at.version;
  // Rows added after `from` whose addition a read of this call listed, and so counted.
  std::set<Uuid> added;
  for (;;) {
    db::NatFeed feed = FP_TRY(db::NatChangesSince(ds_, at.version, kDigestBatch));
    if (feed.current_version < from) return std::optional<Point>();
    for (const auto& c : feed.changes) {
      // The feed lists a row's addition only while the row is live: a row added after `from`
      // and removed before a read listed it shows only as its removal, and was never counted,
      // even when a change between the two was counted first (the position has passed the
      // addition's version by then, so that position cannot tell).
      bool counted = !c.deleted || c.row.version_added <= from || added.count(c.row.id) != 0;
      if (!c.deleted && c.row.version_added > from) added.insert(c.row.id);
      if (counted) {
        uint64_t h = agents::NatEntryHash(ToEntry(c.row));
        at.digest += c.deleted ? -h : h;
        at.entries += c.deleted ? -1 : 1;
      }
      at.version = c.version;
    }
    if (feed.changes.empty() || at.version >= feed.current_version) {
      at.version = std::max(at.version, feed.current_version);
      return std::optional<Point>(at);
    }
  }
}

std::optional<DesiredNat::Point> DesiredNat::Recent(MonoDuration max_age) {
  MutexLock lock(mu_);
  if (!at_ || !read_began_ || syncs_.load() != syncs_at_read_) return std::nullopt;
  if (ds_.clock().Monotonic() - *read_began_ >= max_age) return std::nullopt;
  return at_;
}

void DesiredNat::Rebase(int64_t version, int64_t entries, uint64_t digest) {
  MutexLock lock(mu_);
  if (at_ && at_->version > version) return;
  at_ = Point{.version = version, .digest = digest, .entries = entries};
  last_entries_.store(entries);
}

}  // namespace fp::loops
