#include "db/sleds.h"

namespace fp::db {

Result<Sled> SledFromRow(const Row& r) {
  return Sled{FP_TRY(UuidColumn(r, 0)), r.Text(1), r.Text(2),
              FP_TRY(IpColumn(r, 3)),   r.Int(4),  r.Int(5)};
}

Result<Sled> SledUpsert(Datastore& ds, const std::string& serial, const std::string& agent_url,
                        const IpAddr& underlay) {
  return ds.Write<Sled>([&](Tx& tx) -> Result<Sled> {
    FP_TRY(tx.Exec(
        "INSERT INTO sled (id, serial, agent_url, underlay_address, time_created, time_modified) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (serial) DO UPDATE SET agent_url = "
        "excluded.agent_url, "
        "underlay_address = excluded.underlay_address, time_modified = excluded.time_modified",
        Uuid::Random(), serial, agent_url, underlay, tx.now(), tx.now()));
    auto row = FP_TRY(tx.QueryRow(
        "SELECT id, serial, agent_url, underlay_address, time_created, time_modified FROM sled "
        "WHERE serial = ?",
        serial));
    return SledFromRow(*row);
  });
}

Result<std::vector<Sled>> SledList(Datastore& ds) {
  return ds.Read<std::vector<Sled>>([&](Tx& tx) -> Result<std::vector<Sled>> {
    std::vector<Sled> out;
    for (const Row& r : FP_TRY(tx.Query("SELECT id, serial, agent_url, underlay_address, "
                                        "time_created, time_modified FROM sled ORDER BY id"))) {
      out.push_back(FP_TRY(SledFromRow(r)));
    }
    return out;
  });
}

Result<Sled> SledGetIn(Tx& tx, const Uuid& id) {
  auto row = FP_TRY(tx.QueryRow(
      "SELECT id, serial, agent_url, underlay_address, time_created, time_modified FROM sled "
      "WHERE id = ?",
      id));
  if (!row) return Fail(Error::NotFoundById("sled", id.ToString()));
  return SledFromRow(*row);
}

Result<Sled> SledGet(Datastore& ds, const Uuid& id) {
  return ds.Read<Sled>([&](Tx& tx) { return SledGetIn(tx, id); });
}

Result<std::vector<std::pair<Uuid, int64_t>>> SledLoad(Datastore& ds) {
  using Out = std::vector<std::pair<Uuid, int64_t>>;
  return ds.Read<Out>([&](Tx& tx) -> Result<Out> {
    Out out;
    for (const Row& r : FP_TRY(
             tx.Query("SELECT s.id, (SELECT count(*) FROM instance i WHERE i.sled_id = s.id AND "
                      "i.time_deleted IS NULL AND i.state = 'vmm') FROM sled s ORDER BY s.id"))) {
      out.emplace_back(FP_TRY(UuidColumn(r, 0)), r.Int(1));
    }
    return out;
  });
}

Result<Uuid> PickSledIn(Tx& tx, const std::vector<Uuid>& candidates) {
  std::optional<std::pair<int64_t, Uuid>> best;
  for (const Uuid& sled : candidates) {
    auto row =
        FP_TRY(tx.QueryRow("SELECT count(*) FROM instance WHERE sled_id = ? AND state = 'vmm' AND "
                           "time_deleted IS NULL",
                           sled));
    std::pair<int64_t, Uuid> load{row->Int(0), sled};
    if (!best || load < *best) best = load;
  }
  if (!best) return Fail(Error::Unavailable("no sled is available to run the instance"));
  return best->second;
}

}  // namespace fp::db
