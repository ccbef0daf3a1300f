#pragma once

// The NAT table (nat.cc): a row maps an external IP (and port range) of an instance to the
// sled it runs on; every addition and removal takes the next NAT version, and the switches
// follow the table through the change feed (see NatReconciler).
//
// Versions become visible in the order they were taken, so that a reader that passed version v
// never finds a lower one committed later: on SQLite the one writer takes the counter's next
// value; on PostgreSQL a transaction takes them from a sequence under a lock that it holds to
// its end (LOCK TABLE nat_version_turn), and a lock is let go only once its commit is visible.
// Every change on PostgreSQL is held back (NatEnsureForIpLaterIn, NatRemoveForIpIn,
// NatEnsureForInstanceIn, NatRemoveForInstanceIn): the turn is taken with the change's own
// statements, which the callers place last (a sled's expunge after its request's answer too,
// Tx::AtEnd), so they go with the COMMIT, and transactions run side by side and queue only for
// their last exchange. Every such transaction so locks its other rows (instance, external IP,
// a request's key) before the turn; after it only NAT rows and rows no other transaction waits
// on while holding the turn (its saga's events, its audit entry): none holds the turn while it
// waits for a row another holds before its turn. NatNextVersionIn (tests,
// and NatEnsureForIpIn, which SQLite runs) takes it at once and holds it through the rest of
// its transaction. A version an aborted transaction took is a gap, which the switches skip.

#include <cstdint>
#include <functional>
#include <vector>

#include "db/datastore.h"
#include "model/external_ips.h"
#include "model/instances.h"
#include "model/nat.h"

namespace fp::db {

// Ensures a live NAT row for each of the instance's external IPs pointing at `sled`; a live
// row for the same (ip, ports) with another target is replaced. Returns how many addresses
// have one (none when the instance has no primary NIC). ServiceUnavailable if an IP is mid
// attach/detach. On PostgreSQL the changes are held back (NatEnsureForIpLaterIn).
Result<size_t> NatEnsureForInstanceIn(Tx& tx, const Uuid& instance_id, const Sled& sled);
// The next NAT version, for a row this transaction writes (on PostgreSQL: after the turn's
// lock, which it then holds to its end).
Result<int64_t> NatNextVersionIn(Tx& tx);
// Soft-deletes every live NAT row of the instance. On PostgreSQL one statement, held back
// (Tx::ExecLater) with the turn's lock: a caller that reads after it holds the turn across
// that read, so it comes last (before the transaction's commit) where it can.
Status NatRemoveForInstanceIn(Tx& tx, const Uuid& instance_id);
// The change feed: additions (live rows, at version_added) and removals (at version_removed)
// with version > `after`, in version order, at most `limit`.
struct NatFeedChange {
  NatEntry row;
  int64_t version = 0;
  bool deleted = false;
};
// The NAT changes after version `after` (at most `limit`, in version order), and the current
// NAT version, read in one transaction. May include commits not yet durable (for the switch
// feed only: a switch left ahead by a crash is repaired, see NatReconciler).
struct NatFeed {
  int64_t current_version = 0;
  std::vector<NatFeedChange> changes;
};
Result<NatFeed> NatChangesSince(Datastore& ds, int64_t after, int64_t limit);
// The same, in a transaction of the caller's.
Result<NatFeed> NatChangesSinceIn(Tx& tx, int64_t after, int64_t limit);
// The same read in a write, after its NAT changes, as the transaction commits them: `committed`
// gets it once the transaction committed (not at all otherwise). On SQLite, which writes one
// transaction at a time, the read holds every change after `after` to this transaction's own,
// and every one committed before it. On PostgreSQL the read is made right after the commit, in
// its exchange (Tx::QueryAfterCommit; not in the transaction, whose snapshot predates the
// versions committed before it took its own, late, under the turn's lock): it holds this
// transaction's changes and every lower version, and maybe later ones. If that read fails,
// `committed` is not called: the caller reads the feed itself.
Status NatChangesAtCommitIn(Tx& tx, int64_t after, int64_t limit,
                            std::function<void(NatFeed feed)> committed);
Result<int64_t> NatCurrentVersion(Datastore& ds);
Result<std::vector<NatEntry>> NatLive(Datastore& ds);
// The live rows and the NAT version they are at, in one read (which, as the feed's, may
// include commits not yet durable).
struct NatSnapshot {
  int64_t version = 0;
  std::vector<NatEntry> rows;
};
Result<NatSnapshot> NatReadSnapshot(Datastore& ds);
// The same, each live row given to `each` as it is read (in key order: external_ip, first_port,
// last_port) instead of kept: the rows are read a page at a time, so a whole table (100,000
// rows at rack scale) is never held at once. Returns the NAT version they are at. An error
// from `each` ends the read and is returned. `restart` is called before the first row of each
// attempt: a read the engine runs again (PostgreSQL, after a conflict or a lost connection)
// gives every row again, so whatever `each` gathered is to be dropped there.
Result<int64_t> NatReadSnapshotEach(Datastore& ds, const std::function<void()>& restart,
                                    const std::function<Status(NatEntry&&)>& each);
// NatReadSnapshotEach in two passes over the same rows (one read, so one snapshot): `first`
// is given every row, then `between` is called with the version (false: no second pass), then
// `second` is given every row again. `restart` is called before each attempt's first pass.
Result<int64_t> NatReadSnapshotTwice(Datastore& ds, const std::function<void()>& restart,
                                     const std::function<Status(NatEntry&&)>& first,
                                     const std::function<Result<bool>(int64_t version)>& between,
                                     const std::function<Status(NatEntry&&)>& second);
// Deletes the NAT rows removed at a version below `below_version` (a removal every switch has
// installed) and before `removed_before`: the log keeps removals only as long as a switch may
// still need them (omicron-behaviour.md §5.6). Returns how many rows it deleted.
Result<int64_t> NatCollectGarbage(Datastore& ds, int64_t below_version, Timestamp removed_before);

// NAT rows for one IP of an instance: ensure (pointing at `sled`) and remove. `nic`: the
// instance's primary NIC if the caller read it in this transaction (else it is read here).
Result<std::vector<NatEntry>> NatEnsureForIpIn(Tx& tx, const ExternalIp& ip,
                                               const Uuid& instance_id, const Sled& sled,
                                               const NetworkInterface* nic = nullptr);
// NatEnsureForIpIn for a caller that does not read the rows: on PostgreSQL the turn's lock and
// two statements that go with the transaction's next statement or its COMMIT (Tx::ExecLater),
// no round trip of their own (which read the NIC themselves: `nic` is SQLite's).
Status NatEnsureForIpLaterIn(Tx& tx, const ExternalIp& ip, const Uuid& instance_id,
                             const Sled& sled, const NetworkInterface* nic = nullptr);
// On PostgreSQL one statement, held back likewise.
Status NatRemoveForIpIn(Tx& tx, const ExternalIp& ip);

}  // namespace fp::db
