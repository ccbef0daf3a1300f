#include "db/sleds.h"

#include <fmt/format.h>

#include <set>
#include <utility>
#include <vector>

#include "db/nat.h"

namespace fp::db {

Result<Sled> SledFromRow(const Row& r) {
  Sled s{FP_TRY(UuidColumn(r, 0)), r.Text(1), r.Text(2),
         FP_TRY(IpColumn(r, 3)),   r.Int(4),  r.Int(5)};
  s.expunged = r.Text(6) == "expunged";
  if (!r.IsNull(7)) s.agent_answers = r.Int(7) != 0;
  if (!r.IsNull(8)) s.agent_since = r.Int(8);
  return s;
}

Result<Sled> SledUpsert(Datastore& ds, const std::optional<std::string>& said,
                        const std::string& agent_url, const IpAddr& underlay) {
  return ds.Write<Sled>([&](Tx& tx) -> Result<Sled> {
    std::string serial;
    if (said) {
      serial = *said;
      if (!FP_TRY(tx.QueryRow("SELECT 1 FROM sled WHERE serial = ?", serial))) {
        FP_TRY(tx.Exec("UPDATE sled SET serial = ? WHERE serial = ?", serial, agent_url));
      }
    } else {
      auto last = FP_TRY(tx.QueryRow(
          "SELECT serial FROM sled WHERE agent_url = ? ORDER BY time_modified DESC LIMIT 1",
          agent_url));
      serial = last ? last->Text(0) : agent_url;
    }
    FP_TRY(tx.Exec(
        "INSERT INTO sled (id, serial, agent_url, underlay_address, time_created, time_modified) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (serial) DO UPDATE SET agent_url = "
        "excluded.agent_url, "
        "underlay_address = excluded.underlay_address, time_modified = excluded.time_modified",
        tx.NewId(), serial, agent_url, underlay, tx.now(), tx.now()));
    auto row = FP_TRY(
        tx.QueryRow(fmt::format("SELECT {} FROM sled s WHERE s.serial = ?", kSledColumns), serial));
    return SledFromRow(*row);
  });
}

Result<std::vector<Sled>> SledList(Datastore& ds) {
  return ds.Read<std::vector<Sled>>([&](Tx& tx) -> Result<std::vector<Sled>> {
    std::vector<Sled> out;
    for (const Row& r :
         FP_TRY(tx.Query(fmt::format("SELECT {} FROM sled s ORDER BY s.id", kSledColumns)))) {
      out.push_back(FP_TRY(SledFromRow(r)));
    }
    return out;
  });
}

Result<Sled> SledGetIn(Tx& tx, const Uuid& id) {
  auto row =
      FP_TRY(tx.QueryRow(fmt::format("SELECT {} FROM sled s WHERE s.id = ?", kSledColumns), id));
  if (!row) return Fail(Error::NotFoundById("sled", id.ToString()));
  return SledFromRow(*row);
}

Result<Sled> SledGet(Datastore& ds, const Uuid& id) {
  return ds.Read<Sled>([&](Tx& tx) { return SledGetIn(tx, id); });
}

Result<Uuid> PickSledIn(Tx& tx, const std::vector<Uuid>& candidates) {
  // One statement for every sled in service whose agent answers, not one per candidate: on
  // PostgreSQL each is a round trip, and a rack has 32 sleds. A rack's sled table is small, so
  // counting a sled that is not a candidate costs less than naming the candidates (an IN list
  // of three or more values makes SQLite build a temporary b-tree at each run).
  const std::set<Uuid> wanted(candidates.begin(), candidates.end());
  std::optional<std::pair<int64_t, Uuid>> best;
  for (const Row& r : FP_TRY(tx.Query(
           "SELECT s.id, (SELECT count(*) FROM instance WHERE sled_id = s.id AND state = 'vmm' "
           "AND time_deleted IS NULL) FROM sled s WHERE s.policy = 'in_service' AND "
           "(s.agent_answers IS NULL OR s.agent_answers = 1)"))) {
    Uuid sled = FP_TRY(UuidColumn(r, 0));
    if (!wanted.contains(sled)) continue;
    std::pair<int64_t, Uuid> load{r.Int(1), sled};
    if (!best || load < *best) best = load;
  }
  if (!best) {
    return Fail(Error::Unavailable(
        "no sled is available to run the instance (every sled is expunged or its agent does not "
        "answer)"));
  }
  return best->second;
}

Result<bool> SledRecordAgent(Datastore& ds, const Uuid& sled_id, bool answers,
                             const LeaseFence* fence) {
  return ds.Write<bool>([&](Tx& tx) -> Result<bool> {
    if (fence) FP_CHECK_OK(LeaseFenceCheckIn(tx, *fence));
    int64_t changed =
        FP_TRY(tx.Exec("UPDATE sled SET agent_answers = ?, agent_since = ? WHERE id = ? AND "
                       "(agent_answers IS NULL OR agent_answers <> ?)",
                       answers ? 1 : 0, tx.now(), sled_id, answers ? 1 : 0));
    return changed > 0;
  });
}

Result<Sled> SledExpunge(Datastore& ds, const Uuid& sled_id, const Effect<Sled>& effect) {
  return ds.Write<Sled>(effect, [&](Tx& tx) -> Result<Sled> {
    Sled sled = FP_TRY(SledGetIn(tx, sled_id));
    if (sled.expunged) return sled;
    // A move in progress owns its instance: failing it under a running saga, or a migration
    // landing on the sled after it left service, would leave the two disagreeing.
    // (A migration's destination is in its saga's parameters only: while any migration saga
    // runs, the expunge waits.)
    auto migrating = FP_TRY(tx.QueryRow(
        "SELECT id FROM saga WHERE state IN ('running', 'unwinding') AND name = 'instance_migrate' "
        "LIMIT 1"));
    if (migrating) {
      return Fail(Error::Unavailable(
          fmt::format("a migration is in progress (saga {}); retry the expunge of sled {} when it "
                      "is done",
                      migrating->Text(0), sled_id.ToString())));
    }
    auto busy = FP_TRY(tx.QueryRow(
        "SELECT i.name, i.run_state FROM instance i WHERE i.sled_id = ? AND i.time_deleted IS "
        "NULL AND i.state = 'vmm' AND (i.run_state = 'rebooting' OR EXISTS (SELECT 1 FROM saga g "
        "WHERE g.id = i.start_saga_id AND g.state IN ('running', 'unwinding'))) LIMIT 1",
        sled_id));
    if (busy) {
      return Fail(Error::Unavailable(
          fmt::format("instance \"{}\" is {}; retry the expunge of sled {} when that is done",
                      busy->Text(0), busy->Text(1), sled_id.ToString())));
    }
    std::vector<Uuid> failed;
    for (const Row& r : FP_TRY(tx.Query(
             "SELECT id FROM instance WHERE sled_id = ? AND state = 'vmm' AND time_deleted IS NULL",
             sled_id))) {
      Uuid id = FP_TRY(UuidColumn(r, 0));
      FP_TRY(tx.Exec(
          "UPDATE instance SET state = 'failed', run_state = 'failed', sled_id = NULL, "
          "start_saga_id = NULL, time_run_state_updated = ?, time_modified = ? WHERE id = ?",
          tx.now(), tx.now(), id));
      failed.push_back(id);
    }
    FP_TRY(tx.Exec("UPDATE sled SET policy = 'expunged', time_modified = ? WHERE id = ?", tx.now(),
                   sled_id));
    // At the end, after the request's answer and audit entry too: on PostgreSQL the removals go
    // with the commit, so that no attach or detach in the fleet waits for the NAT versions'
    // turn while this loops over the sled's instances or records its answer.
    tx.AtEnd([failed](Tx& end) -> Status {
      for (const Uuid& id : failed) FP_CHECK_OK(NatRemoveForInstanceIn(end, id));
      return Ok();
    });
    return SledGetIn(tx, sled_id);
  });
}

}  // namespace fp::db
