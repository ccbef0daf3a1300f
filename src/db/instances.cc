#include "db/instances.h"

#include <fmt/format.h>

#include "db/counters.h"
#include "db/external_ips.h"
#include "db/ip_allocation.h"
#include "db/nat.h"

namespace fp::db {

namespace {

Result<InstanceState> ParseState(std::string_view s) {
  auto state = ParseInstanceState(s);
  if (!state) return Fail(Error::Internal(fmt::format("corrupt instance state \"{}\"", s)));
  return *state;
}

Result<RunState> RunStateColumn(const Row& r, size_t i) {
  auto state = ParseRunState(r.Text(i));
  if (!state) return Fail(Error::Internal(fmt::format("corrupt run state \"{}\"", r.Text(i))));
  return *state;
}

}  // namespace

Result<Instance> InstanceFromRow(const Row& r) {
  Instance i;
  i.id = FP_TRY(UuidColumn(r, 0));
  i.project_id = FP_TRY(UuidColumn(r, 1));
  i.name = r.Text(2);
  i.description = r.Text(3);
  i.hostname = r.Text(4);
  i.ncpus = r.Int(5);
  i.memory = r.Int(6);
  i.state = FP_TRY(ParseState(r.Text(7)));
  i.run_state = FP_TRY(RunStateColumn(r, 8));
  i.sled_id = FP_TRY(OptUuidColumn(r, 9));
  i.migration_id = FP_TRY(OptUuidColumn(r, 10));
  i.time_run_state_updated = r.Int(11);
  i.time_created = r.Int(12);
  i.time_modified = r.Int(13);
  i.start_saga_id = FP_TRY(OptUuidColumn(r, 14));
  return i;
}

namespace {

std::string MacFromCounter(int64_t n) {
  uint64_t v = 0xA84025F00000ull + static_cast<uint64_t>(n);
  return fmt::format("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", (v >> 40) & 0xff,
                     (v >> 32) & 0xff, (v >> 24) & 0xff, (v >> 16) & 0xff, (v >> 8) & 0xff,
                     v & 0xff);
}

}  // namespace

Result<Instance> InstanceGetIn(Tx& tx, const Uuid& id) {
  auto row = FP_TRY(
      tx.QueryRow(fmt::format("SELECT {} FROM instance i WHERE i.id = ? AND i.time_deleted IS NULL",
                              kInstanceColumns),
                  id));
  if (!row) return Fail(Error::NotFoundById("instance", id.ToString()));
  return InstanceFromRow(*row);
}

Result<Instance> InstanceAnyState(Datastore& ds, const Uuid& id) {
  return ds.Read<Instance>([&](Tx& tx) -> Result<Instance> {
    auto row = FP_TRY(
        tx.QueryRow(fmt::format("SELECT {} FROM instance i WHERE i.id = ?", kInstanceColumns), id));
    if (!row) return Fail(Error::NotFoundById("instance", id.ToString()));
    return InstanceFromRow(*row);
  });
}

namespace {

// PostgreSQL: an instance's row beside each of its IPs (NULLs beside it when it has none), in
// InstanceExternalIpsIn's order. Parameters: the instance's id, twice.
const std::string& InstanceWithIpsOnPostgres() {
  static const std::string kSql = fmt::format(
      "SELECT i.*, e.* FROM (SELECT {} FROM instance i WHERE i.id = ?) i LEFT JOIN (SELECT {} "
      "FROM external_ip e WHERE e.parent_id = ? AND e.time_deleted IS NULL) e ON true ORDER BY "
      "e.kind DESC, e.ip",
      kInstanceColumns, kExternalIpColumns);
  return kSql;
}

// Decodes InstanceWithIpsOnPostgres's rows (at least one).
Result<InstanceAndIps> InstanceWithIpsFromRows(const std::vector<Row>& rows) {
  InstanceAndIps out{FP_TRY(InstanceFromRow(rows.front().Slice(0, kInstanceColumnCount))), {}};
  for (const Row& r : rows) {
    if (r.IsNull(kInstanceColumnCount)) break;
    out.ips.push_back(
        FP_TRY(ExternalIpFromRow(r.Slice(kInstanceColumnCount, kExternalIpColumnCount))));
  }
  return out;
}

}  // namespace

Result<InstanceAndIps> InstanceAnyStateWithIps(Reader ds, const Uuid& id) {
  return ds.Read<InstanceAndIps>([&](Tx& tx) -> Result<InstanceAndIps> {
    if (tx.postgres()) {
      // One statement, which carries the COMMIT (one round trip, not three).
      auto rows = FP_TRY(tx.QueryLast(InstanceWithIpsOnPostgres(), id, id));
      if (rows.empty()) return Fail(Error::NotFoundById("instance", id.ToString()));
      return InstanceWithIpsFromRows(rows);
    }
    auto row = FP_TRY(
        tx.QueryRow(fmt::format("SELECT {} FROM instance i WHERE i.id = ?", kInstanceColumns), id));
    if (!row) return Fail(Error::NotFoundById("instance", id.ToString()));
    InstanceAndIps out{FP_TRY(InstanceFromRow(*row)), {}};
    out.ips = FP_TRY(InstanceExternalIpsIn(tx, id));
    return out;
  });
}

Result<std::map<Uuid, InstanceAndIps>> InstancesAnyStateWithIps(Reader ds,
                                                                const std::vector<Uuid>& ids) {
  using Out = std::map<Uuid, InstanceAndIps>;
  if (ids.empty()) return Out{};
  return ds.Read<Out>([&](Tx& tx) -> Result<Out> {
    Out out;
    if (tx.postgres()) {
      // InstanceAnyStateWithIps's statement for each, all in one exchange with the COMMIT.
      std::vector<std::vector<SqlValue>> params;
      params.reserve(ids.size());
      for (const Uuid& id : ids) {
        SqlValue text = id.ToString();
        params.push_back({text, text});
      }
      const auto results = FP_TRY(tx.QueryEachLast(InstanceWithIpsOnPostgres(), params));
      for (const std::vector<Row>& rows : results) {
        if (rows.empty()) continue;
        InstanceAndIps entry = FP_TRY(InstanceWithIpsFromRows(rows));
        out.emplace(entry.instance.id, std::move(entry));
      }
      return out;
    }
    for (const Uuid& id : ids) {
      auto row = FP_TRY(tx.QueryRow(
          fmt::format("SELECT {} FROM instance i WHERE i.id = ?", kInstanceColumns), id));
      if (!row) continue;
      InstanceAndIps entry{FP_TRY(InstanceFromRow(*row)), {}};
      entry.ips = FP_TRY(InstanceExternalIpsIn(tx, id));
      out.emplace(id, std::move(entry));
    }
    return out;
  });
}

Result<Instance> InstanceByIdIn(Tx& tx, const Uuid& silo_id, const Uuid& id) {
  auto row = FP_TRY(tx.QueryRow(
      fmt::format("SELECT {} FROM instance i JOIN project p ON p.id = i.project_id WHERE "
                  "i.id = ? AND i.time_deleted IS NULL AND p.silo_id = ? AND "
                  "p.time_deleted IS NULL",
                  kInstanceColumns),
      id, silo_id));
  if (!row) return Fail(Error::NotFoundById("instance", id.ToString()));
  return InstanceFromRow(*row);
}

Result<Instance> InstanceById(Reader ds, const Uuid& silo_id, const Uuid& id) {
  return ds.Read<Instance>(
      [&](Tx& tx) -> Result<Instance> { return InstanceByIdIn(tx, silo_id, id); });
}

Result<Instance> InstanceByName(Reader ds, const Uuid& project_id, const std::string& name) {
  return ds.Read<Instance>([&](Tx& tx) -> Result<Instance> {
    auto row = FP_TRY(tx.QueryRow(
        fmt::format("SELECT {} FROM instance i WHERE i.project_id = ? AND i.name = ? AND "
                    "i.time_deleted IS NULL",
                    kInstanceColumns),
        project_id, name));
    if (!row) return Fail(Error::NotFoundByName("instance", name));
    return InstanceFromRow(*row);
  });
}

Result<std::vector<Instance>> InstanceList(Datastore& ds, const Uuid& project_id,
                                           const PageRequest& page) {
  return ds.Read<std::vector<Instance>>([&](Tx& tx) -> Result<std::vector<Instance>> {
    std::vector<SqlValue> params{project_id.ToString()};
    std::string sql =
        fmt::format("SELECT {} FROM instance i WHERE i.project_id = ? AND i.time_deleted IS NULL",
                    kInstanceColumns);
    sql += PageClause(page, "i.name", "i.id", params);
    std::vector<Instance> out;
    for (const Row& r : FP_TRY(tx.QueryV(sql, params))) out.push_back(FP_TRY(InstanceFromRow(r)));
    return out;
  });
}

Result<std::vector<Instance>> InstancesOnSled(Datastore& ds, const Uuid& sled_id) {
  return ds.Read<std::vector<Instance>>([&](Tx& tx) -> Result<std::vector<Instance>> {
    std::vector<Instance> out;
    for (const Row& r :
         FP_TRY(tx.Query(fmt::format("SELECT {} FROM instance i WHERE i.sled_id = ? AND "
                                     "i.time_deleted IS NULL ORDER BY i.id",
                                     kInstanceColumns),
                         sled_id))) {
      out.push_back(FP_TRY(InstanceFromRow(r)));
    }
    return out;
  });
}

Result<std::pair<std::string, std::string>> InstanceNames(Datastore& ds, const Uuid& id) {
  using Out = std::pair<std::string, std::string>;
  return ds.Read<Out>([&](Tx& tx) -> Result<Out> {
    auto row = FP_TRY(
        tx.QueryRow("SELECT p.name, s.name FROM instance i JOIN project p ON p.id = i.project_id "
                    "JOIN silo s ON s.id = p.silo_id WHERE i.id = ?",
                    id));
    if (!row) return Fail(Error::NotFoundById("instance", id.ToString()));
    return Out{row->Text(0), row->Text(1)};
  });
}

Result<std::optional<NetworkInterface>> PrimaryNicIn(Tx& tx, const Uuid& instance_id) {
  auto row = FP_TRY(tx.QueryRow(
      "SELECT n.id, n.instance_id, n.vpc_id, n.name, n.mac, n.ipv4, n.ipv6, v.vni "
      "FROM network_interface n JOIN vpc v ON v.id = n.vpc_id WHERE n.instance_id = ? AND "
      "n.is_primary = 1 AND n.time_deleted IS NULL",
      instance_id));
  if (!row) return std::optional<NetworkInterface>();
  NetworkInterface n;
  n.id = FP_TRY(UuidColumn(*row, 0));
  n.instance_id = FP_TRY(UuidColumn(*row, 1));
  n.vpc_id = FP_TRY(UuidColumn(*row, 2));
  n.name = row->Text(3);
  n.mac = row->Text(4);
  if (!row->IsNull(5)) n.ipv4 = FP_TRY(IpColumn(*row, 5));
  if (!row->IsNull(6)) n.ipv6 = FP_TRY(IpColumn(*row, 6));
  n.vni = row->Int(7);
  return std::optional<NetworkInterface>(n);
}

Result<std::optional<NetworkInterface>> PrimaryNic(Datastore& ds, const Uuid& instance_id) {
  return ds.Read<std::optional<NetworkInterface>>(
      [&](Tx& tx) { return PrimaryNicIn(tx, instance_id); });
}

Result<Instance> InstanceUpdateFields(Datastore& ds, const Uuid& id, const InstanceUpdate& u,
                                      const Effect<Instance>& effect) {
  return ds.Write<Instance>(effect, [&](Tx& tx) -> Result<Instance> {
    Instance i = FP_TRY(InstanceGetIn(tx, id));
    if (u.name && *u.name != i.name) {
      auto dup = FP_TRY(tx.QueryRow(
          "SELECT 1 FROM instance WHERE project_id = ? AND name = ? AND time_deleted IS NULL",
          i.project_id, *u.name));
      if (dup) return Fail(Error::AlreadyExists("instance", *u.name));
      i.name = *u.name;
    }
    if (u.description) i.description = *u.description;
    if (u.hostname) i.hostname = *u.hostname;
    bool resources = (u.ncpus && *u.ncpus != i.ncpus) || (u.memory && *u.memory != i.memory);
    if (resources && i.state != InstanceState::kNoVmm) {
      return Fail(Error::InvalidRequest(
          fmt::format("instance \"{}\" must be stopped to change ncpus or memory (it is {})",
                      i.name, ToString(i.run_state))));
    }
    if (u.ncpus) i.ncpus = *u.ncpus;
    if (u.memory) i.memory = *u.memory;
    i.time_modified = tx.now();
    FP_TRY(tx.Exec(
        "UPDATE instance SET name = ?, description = ?, hostname = ?, ncpus = ?, memory = ?, "
        "time_modified = ? WHERE id = ?",
        i.name, i.description, i.hostname, i.ncpus, i.memory, i.time_modified, id));
    return i;
  });
}

Result<Instance> InstanceCreateRecordIn(Tx& tx, const InstanceCreate& p) {
  auto existing = FP_TRY(tx.QueryRow("SELECT 1 FROM instance WHERE id = ?", p.id));
  if (existing) return InstanceGetIn(tx, p.id);  // re-run of a committed step
  auto project = FP_TRY(
      tx.QueryRow("SELECT 1 FROM project WHERE id = ? AND time_deleted IS NULL", p.project_id));
  if (!project) return Fail(Error::NotFoundById("project", p.project_id.ToString()));
  auto dup = FP_TRY(tx.QueryRow(
      "SELECT 1 FROM instance WHERE project_id = ? AND name = ? AND time_deleted IS NULL",
      p.project_id, p.name));
  if (dup) return Fail(Error::AlreadyExists("instance", p.name));
  FP_TRY(tx.Exec(
      "INSERT INTO instance (id, project_id, name, description, hostname, ncpus, memory, state, "
      "run_state, time_run_state_updated, time_created, time_modified) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, 'creating', 'creating', ?, ?, ?)",
      p.id, p.project_id, p.name, p.description, p.hostname, p.ncpus, p.memory, tx.now(), tx.now(),
      tx.now()));
  if (p.nic != NicKind::kNone) {
    // The project's VPC, created on first use with a VNI of its own and a ULA /64.
    auto vpc = FP_TRY(
        tx.QueryRow("SELECT id, vni, ipv6_prefix FROM vpc WHERE project_id = ?", p.project_id));
    Uuid vpc_id;
    IpAddr prefix;
    if (vpc) {
      vpc_id = FP_TRY(UuidColumn(*vpc, 0));
      prefix = FP_TRY(IpColumn(*vpc, 2));
    } else {
      int64_t vni = FP_TRY(CounterNextIn(tx, "vni", 1024));
      vpc_id = tx.NewId();
      prefix = IpAddr(IpVersion::kV6,
                      (uint128{0xfd00u} << 112) | (uint128(static_cast<uint64_t>(vni)) << 64));
      FP_TRY(tx.Exec(
          "INSERT INTO vpc (id, project_id, vni, ipv6_prefix, time_created) VALUES (?, ?, ?, ?, ?)",
          vpc_id, p.project_id, vni, prefix, tx.now()));
    }
    int64_t host = FP_TRY(CounterNextIn(tx, "nic_host:" + vpc_id.ToString(), 5));
    std::optional<IpAddr> v4, v6;
    if (p.nic == NicKind::kIpv4 || p.nic == NicKind::kDualStack) {
      if (host > 1020) {
        return Fail(
            Error::InsufficientCapacity("No private IPv4 addresses left in the VPC subnet"));
      }
      v4 = IpAddr(IpVersion::kV4,
                  (uint128{172} << 24 | uint128{30} << 16) + static_cast<uint64_t>(host));
    }
    if (p.nic == NicKind::kIpv6 || p.nic == NicKind::kDualStack) {
      v6 = IpAddr(IpVersion::kV6, prefix.value() + static_cast<uint64_t>(host));
    }
    std::string mac = MacFromCounter(FP_TRY(CounterNextIn(tx, "mac", 1)));
    FP_TRY(
        tx.Exec("INSERT INTO network_interface (id, instance_id, vpc_id, name, mac, ipv4, ipv6, "
                "is_primary, time_created) VALUES (?, ?, ?, 'net0', ?, ?, ?, 1, ?)",
                p.nic_id, p.id, vpc_id, mac, v4 ? SqlValue(Blob{v4->Key()}) : SqlValue(nullptr),
                v6 ? SqlValue(Blob{v6->Key()}) : SqlValue(nullptr), tx.now()));
  }
  return InstanceGetIn(tx, p.id);
}

Status InstanceDeleteRecordIn(Tx& tx, const Uuid& id) {
  if (tx.postgres()) {
    FP_TRY(
        tx.Exec("UPDATE network_interface SET time_deleted = ? WHERE instance_id = ? AND "
                "time_deleted IS NULL",
                tx.now(), id));
  } else {
    // SQLite would collect the rows in a temporary b-tree first: the update takes them out of
    // nic_by_instance, the index its search reads. By key instead (an instance has one).
    for (const Row& nic : FP_TRY(tx.Query(
             "SELECT id FROM network_interface WHERE instance_id = ? AND time_deleted IS NULL",
             id))) {
      FP_TRY(tx.Exec("UPDATE network_interface SET time_deleted = ? WHERE id = ?", tx.now(),
                     nic.Text(0)));
    }
  }
  FP_TRY(
      tx.Exec("UPDATE instance SET time_deleted = ?, state = 'destroyed', run_state = "
              "'destroyed' WHERE id = ? AND time_deleted IS NULL",
              tx.now(), id));
  return Ok();
}

Status InstanceFinishCreateIn(Tx& tx, const Uuid& id) {
  FP_TRY(tx.Exec(
      "UPDATE instance SET state = 'no_vmm', run_state = 'stopped', time_run_state_updated = ? "
      "WHERE id = ? AND state = 'creating' AND time_deleted IS NULL",
      tx.now(), id));
  return Ok();
}

Result<Instance> InstanceBeginStartIn(Tx& tx, const Uuid& id, const Uuid& sled_id,
                                      const Uuid& saga_id) {
  Instance i = FP_TRY(InstanceGetIn(tx, id));
  if (i.state == InstanceState::kVmm && i.start_saga_id == saga_id) return i;  // re-run
  if (i.state == InstanceState::kVmm && i.run_state == RunState::kStarting) {
    return Fail(Error::Unavailable(fmt::format(
        "instance \"{}\" is being started by another request; retry when it completes", i.name)));
  }
  // A failed instance starts again, as a stopped one does (Oxide allows both).
  if (i.state != InstanceState::kNoVmm && i.state != InstanceState::kFailed) {
    return Fail(Error::InvalidRequest(fmt::format(
        "instance \"{}\" cannot be started while it is {}", i.name, ToString(i.run_state))));
  }
  FP_TRY(tx.Exec(
      "UPDATE instance SET state = 'vmm', run_state = 'starting', sled_id = ?, start_saga_id = ?, "
      "time_run_state_updated = ?, time_modified = ? WHERE id = ?",
      sled_id, saga_id, tx.now(), tx.now(), id));
  return InstanceGetIn(tx, id);
}

Result<Instance> InstanceStopFailed(Datastore& ds, const Uuid& id, const Effect<Instance>& effect) {
  return ds.Write<Instance>(effect, [&](Tx& tx) -> Result<Instance> {
    // Only if still failed: a start since made it something else, which the caller's answer
    // then shows.
    FP_TRY(
        tx.Exec("UPDATE instance SET state = 'no_vmm', run_state = 'stopped', "
                "time_run_state_updated = ?, time_modified = ? WHERE id = ? AND state = "
                "'failed' AND time_deleted IS NULL",
                tx.now(), tx.now(), id));
    return InstanceGetIn(tx, id);
  });
}

Status InstanceUndoStartIn(Tx& tx, const Uuid& id, const Uuid& sled_id) {
  FP_TRY(
      tx.Exec("UPDATE instance SET state = 'no_vmm', run_state = 'stopped', sled_id = NULL, "
              "start_saga_id = NULL, "
              "time_run_state_updated = ? WHERE id = ? AND state = 'vmm' AND sled_id = ?",
              tx.now(), id, sled_id));
  return NatRemoveForInstanceIn(tx, id);  // last: on PostgreSQL it goes with the commit
}

Result<Instance> InstanceSetRunState(Datastore& ds, const Uuid& id, RunState run_state,
                                     const Effect<Instance>& effect) {
  return ds.Write<Instance>(effect, [&](Tx& tx) -> Result<Instance> {
    Instance i = FP_TRY(InstanceGetIn(tx, id));
    // Only an instance that still has a VMM: the watcher may have recorded it stopped since
    // the caller read it.
    if (i.run_state == run_state || i.state != InstanceState::kVmm) return i;
    FP_TRY(tx.Exec("UPDATE instance SET run_state = ?, time_run_state_updated = ? WHERE id = ?",
                   ToString(run_state), tx.now(), id));
    return InstanceGetIn(tx, id);
  });
}

Result<Instance> InstanceRecordRunState(Datastore& ds, const Uuid& id, RunState run_state,
                                        const Instance* judged_on, const LeaseFence* fence) {
  return ds.Write<Instance>([&](Tx& tx) -> Result<Instance> {
    if (fence) FP_CHECK_OK(LeaseFenceCheckIn(tx, *fence));
    Instance i = FP_TRY(InstanceGetIn(tx, id));
    if (i.state != InstanceState::kVmm || i.migration_id) return i;  // sagas own these moves
    if (judged_on && (i.sled_id != judged_on->sled_id || i.run_state != judged_on->run_state ||
                      i.start_saga_id != judged_on->start_saga_id)) {
      return i;  // moved on since the caller read it: its next look judges again
    }
    if (run_state == RunState::kStopped || run_state == RunState::kFailed) {
      FP_TRY(tx.Exec(
          "UPDATE instance SET state = ?, run_state = ?, sled_id = NULL, start_saga_id = NULL, "
          "time_run_state_updated = ?, time_modified = ? WHERE id = ?",
          run_state == RunState::kStopped ? "no_vmm" : "failed", ToString(run_state), tx.now(),
          tx.now(), id));
      Instance after = FP_TRY(InstanceGetIn(tx, id));
      FP_CHECK_OK(NatRemoveForInstanceIn(tx, id));  // last: on PostgreSQL it goes with the commit
      return after;
    } else if (run_state != i.run_state) {
      FP_TRY(tx.Exec("UPDATE instance SET run_state = ?, time_run_state_updated = ? WHERE id = ?",
                     ToString(run_state), tx.now(), id));
    }
    return InstanceGetIn(tx, id);
  });
}

Status InstanceDeleteIn(Tx& tx, const Uuid& id) {
  auto row = FP_TRY(
      tx.QueryRow(fmt::format("SELECT {} FROM instance i WHERE i.id = ?", kInstanceColumns), id));
  if (!row) return Fail(Error::NotFoundById("instance", id.ToString()));
  Instance i = FP_TRY(InstanceFromRow(*row));
  if (i.state == InstanceState::kDestroyed) return Ok();  // re-run
  if (i.state == InstanceState::kVmm) {
    return Fail(Error::InvalidRequest(fmt::format(
        "cannot delete instance: instance is running or has not yet fully stopped (instance "
        "\"{}\" is {}; stop it first)",
        i.name, ToString(i.run_state))));
  }
  if (i.state != InstanceState::kNoVmm && i.state != InstanceState::kFailed) {
    return Fail(Error::InvalidRequest(
        fmt::format("instance cannot be deleted in state \"{}\"", ToString(i.run_state))));
  }
  for (const ExternalIp& e : FP_TRY(InstanceExternalIpsIn(tx, id))) {
    if (e.kind == IpKind::kFloating) {
      FP_TRY(
          tx.Exec("UPDATE external_ip SET parent_id = NULL, state = 'detached', "
                  "time_modified = ? WHERE id = ?",
                  tx.now(), e.id));
    } else {
      FP_CHECK_OK(ExternalIpReleaseIn(tx, e.id));
    }
  }
  FP_CHECK_OK(InstanceDeleteRecordIn(tx, id));
  return NatRemoveForInstanceIn(tx, id);  // last: on PostgreSQL it goes with the commit
}

}  // namespace fp::db
