// Completing and undoing the steps that db/attach.cc begins: an operation's end state (and an
// ephemeral IP's release with it), a move given back to the instance it came from, and the
// ephemeral IP an instance create or attach allocates.

#include <fmt/format.h>

#include "db/attach.h"
#include "db/external_ips.h"
#include "db/ip_allocation.h"
#include "db/ip_pools.h"
#include "db/quotas.h"

namespace fp::db {

namespace {

// PostgreSQL: CompleteOpIn's read and change as one statement. It changes the row only when it
// is live and in `expected`, returns its address to the pool when the change released it (an
// ephemeral IP detached), and returns what it read (kind, state, deleted), whether it changed
// the row, fp_release_address's outcome when it released one, and then the row's columns
// (kExternalIpColumns) as the change left it. Parameters: IP id, expected, target, now.
std::string CompleteStatement() {
  // kExternalIpColumns names its table `e`: the same columns of another.
  auto columns_of = [](char alias) {
    std::string out;
    std::string_view in = kExternalIpColumns;
    for (size_t i = 0; i < in.size(); ++i) {
      const bool prefix = in.substr(i, 2) == "e." && (i == 0 || in[i - 1] == ' ');
      out += prefix ? alias : in[i];
    }
    return out;
  };
  return fmt::format(
      "WITH p AS (SELECT ?::text AS id, ?::text AS expected, ?::text AS target, ?::bigint AS "
      "now), "
      "e AS (SELECT {0}, e.time_deleted IS NOT NULL AS deleted FROM external_ip e, p "
      "WHERE e.id = p.id), "
      // As ExternalIpReleaseIn: a released ephemeral IP keeps its op_saga_id and time_modified.
      "t AS (UPDATE external_ip u SET state = p.target, "
      "parent_id = CASE WHEN p.target = 'detached' THEN NULL ELSE u.parent_id END, "
      "op_saga_id = CASE WHEN u.kind = 'ephemeral' AND p.target = 'detached' THEN u.op_saga_id "
      "END, op_from_parent_id = NULL, "
      "time_modified = CASE WHEN u.kind = 'ephemeral' AND p.target = 'detached' THEN "
      "u.time_modified ELSE p.now END, "
      "time_deleted = CASE WHEN u.kind = 'ephemeral' AND p.target = 'detached' THEN p.now END "
      "FROM p, e WHERE u.id = p.id AND NOT e.deleted AND e.state = p.expected AND "
      "u.time_deleted IS NULL AND u.state = p.expected "
      "RETURNING u.time_deleted IS NOT NULL AS released, {1}), "
      "r AS MATERIALIZED (SELECT fp_release_address(t.ip_pool_id, t.ip_pool_range_id, t.ip, "
      "t.first_port, t.last_port) AS outcome FROM t WHERE t.released) "
      "SELECT e.kind, e.state, e.deleted, (SELECT count(*) FROM t), (SELECT outcome FROM r), "
      "x.* FROM e, LATERAL (SELECT {2} FROM t UNION ALL SELECT {0} WHERE NOT EXISTS "
      "(SELECT 1 FROM t)) x",
      kExternalIpColumns, columns_of('u'), columns_of('t'));
}
constexpr size_t kCompleteRowAt = 5;  // where the row's columns start

// CompleteOpIn; with `after`, also the row as the transaction leaves it.
Result<int64_t> CompleteOp(Tx& tx, const Uuid& ip_id, AttachState expected, AttachState target,
                           std::optional<ExternalIp>* after) {
  if (expected != AttachState::kAttaching && expected != AttachState::kDetaching) {
    return Fail(Error::Internal(
        fmt::format("{} is not a valid transition state for attach/detach", ToString(expected))));
  }
  static const std::string kCompleteStatement = CompleteStatement();
  // SQLite: when the caller wants the row, all of it is read at once, and given back as the
  // update below leaves it (an ephemeral address's release excepted: read again).
  static const std::string kWholeRow = fmt::format(
      "SELECT {}, e.time_deleted FROM external_ip e WHERE e.id = ?", kExternalIpColumns);
  std::optional<Row> row;
  std::optional<ExternalIp> before;
  if (tx.postgres()) {
    row = FP_TRY(
        tx.QueryRow(kCompleteStatement, ip_id, ToString(expected), ToString(target), tx.now()));
  } else if (after != nullptr) {
    row = FP_TRY(tx.QueryRow(kWholeRow, ip_id));
    if (row) before = FP_TRY(ExternalIpFromRow(row->Slice(0, kExternalIpColumnCount)));
  } else {
    row = FP_TRY(
        tx.QueryRow("SELECT kind, state, time_deleted FROM external_ip WHERE id = ?", ip_id));
  }
  if (!row) return Fail(Error::NotFoundById("external-ip", ip_id.ToString()));
  const std::string state = before ? std::string(ToString(before->state)) : row->Text(1);
  const bool deleted = tx.postgres() ? row->Int(2) != 0
                       : before      ? !row->IsNull(kExternalIpColumnCount)
                                     : !row->IsNull(2);
  if (deleted || state != ToString(expected)) {
    if (expected == AttachState::kAttaching && target == AttachState::kAttached &&
        (deleted || state == "detached")) {
      // The instance was deleted while the IP was being attached (its delete detaches every
      // IP): the attach fails and its saga unwinds. A client error, not an internal one.
      return Fail(Error::NotFound(
          "instance (it was deleted while the external IP was being attached to it)"));
    }
    if (after != nullptr) {
      *after = tx.postgres()
                   ? FP_TRY(ExternalIpFromRow(row->Slice(kCompleteRowAt, kExternalIpColumnCount)))
                   : std::move(*before);
    }
    return int64_t{0};
  }
  if (tx.postgres()) {
    if (row->Int(3) != 1 || (!row->IsNull(4) && row->Text(4) != "ok")) {
      return Fail(Error::Internal(
          fmt::format("completing the operation on external IP {} changed {} rows (release: {})",
                      ip_id.ToString(), row->Int(3), row->OptText(4).value_or("none"))));
    }
    if (after != nullptr) {
      *after = FP_TRY(ExternalIpFromRow(row->Slice(kCompleteRowAt, kExternalIpColumnCount)));
    }
    return int64_t{1};
  }
  int64_t changed = 1;
  if (target == AttachState::kDetached) {
    if (before ? before->kind == IpKind::kEphemeral : row->Text(0) == "ephemeral") {
      FP_CHECK_OK(ExternalIpReleaseIn(tx, ip_id));
      if (after != nullptr) *after = FP_TRY(ExternalIpGetIn(tx, ip_id));
      return changed;
    }
    FP_TRY(
        tx.Exec("UPDATE external_ip SET state = 'detached', parent_id = NULL, op_saga_id = NULL, "
                "op_from_parent_id = NULL, time_modified = ? WHERE id = ?",
                tx.now(), ip_id));
    if (before) before->parent_id.reset();
  } else {
    changed = FP_TRY(
        tx.Exec("UPDATE external_ip SET state = ?, op_saga_id = NULL, op_from_parent_id = NULL, "
                "time_modified = ? WHERE id = ?",
                ToString(target), tx.now(), ip_id));
  }
  if (after != nullptr) {
    before->state = target;
    before->time_modified = tx.now();
    *after = std::move(*before);
  }
  return changed;
}

}  // namespace

Result<int64_t> CompleteOpIn(Tx& tx, const Uuid& ip_id, AttachState expected, AttachState target) {
  return CompleteOp(tx, ip_id, expected, target, nullptr);
}

Result<ExternalIp> CompleteOpAndGetIn(Tx& tx, const Uuid& ip_id, AttachState expected,
                                      AttachState target) {
  std::optional<ExternalIp> after;
  FP_TRY(CompleteOp(tx, ip_id, expected, target, &after));
  return std::move(*after);
}

Result<bool> IpHeldBySagaIn(Tx& tx, const Uuid& ip_id, const Uuid& saga_id) {
  // A released ephemeral row keeps its op_saga_id: only a live row in transition counts.
  auto row = FP_TRY(
      tx.QueryRow("SELECT 1 FROM external_ip WHERE id = ? AND op_saga_id = ? AND time_deleted IS "
                  "NULL AND state IN ('attaching', 'detaching')",
                  ip_id, saga_id));
  return row.has_value();
}

Result<MoveBack> UndoMoveIn(Tx& tx, const Uuid& ip_id, const Uuid& saga_id, const Uuid& from) {
  MoveBack out;
  out.held = FP_TRY(IpHeldBySagaIn(tx, ip_id, saga_id));
  ExternalIp ip = FP_TRY(ExternalIpGetIn(tx, ip_id));
  auto row = FP_TRY(
      tx.QueryRow(fmt::format("SELECT {} FROM instance i WHERE i.id = ? AND i.time_deleted IS NULL",
                              kInstanceColumns),
                  from));
  std::optional<Instance> source;
  if (row) source = FP_TRY(InstanceFromRow(*row));
  if (!out.held) {
    // Undone before (a crash after this undo's commit), or settled since by another operation:
    // say where the IP is if it is back on `from`, so that the ports can be put right again.
    if (source && ip.parent_id == from && ip.state == AttachState::kAttached) {
      out.instance = from;
      if (source->state == InstanceState::kVmm && source->sled_id) {
        auto sled = FP_TRY(tx.QueryRow(
            fmt::format("SELECT {} FROM sled s WHERE s.id = ?", kSledColumns), *source->sled_id));
        if (sled) out.sled = FP_TRY(SledFromRow(*sled));
      }
    }
    return out;
  }
  // A failed instance can hold it again too (it held it: a failover that failed gives it back).
  bool back = source && !source->migration_id && source->project_id == ip.project_id &&
              (source->state == InstanceState::kNoVmm || source->state == InstanceState::kFailed ||
               (source->state == InstanceState::kVmm && source->run_state == RunState::kRunning));
  if (back) {
    // Within its limit of external IPs: others may have been attached to it meanwhile.
    auto others = FP_TRY(tx.QueryRow(
        "SELECT count(*) FROM external_ip WHERE parent_id = ? AND time_deleted IS NULL AND "
        "kind != 'snat'",
        from));
    back = others->Int(0) < kMaxExternalIpsPerInstance;
  }
  if (back && source->state == InstanceState::kVmm) {
    auto sled =
        FP_TRY(tx.QueryRow(fmt::format("SELECT {} FROM sled s WHERE s.id = ?", kSledColumns),
                           source->sled_id.value_or(Uuid())));
    if (sled) {
      out.sled = FP_TRY(SledFromRow(*sled));
    } else {
      back = false;
    }
  }
  if (!back) {
    out.sled.reset();
    FP_TRY(CompleteOpIn(tx, ip_id, AttachState::kAttaching, AttachState::kDetached));
    return out;
  }
  FP_TRY(
      tx.Exec("UPDATE external_ip SET parent_id = ?, state = 'attached', op_saga_id = NULL, "
              "op_from_parent_id = NULL, time_modified = ? WHERE id = ?",
              from, tx.now(), ip_id));
  out.instance = from;
  return out;
}

Status ReleaseFloatingFromInstanceIn(Tx& tx, const Uuid& ip_id, const Uuid& instance_id) {
  FP_TRY(
      tx.Exec("UPDATE external_ip SET parent_id = NULL, state = 'detached', op_saga_id = NULL, "
              "time_modified = ? WHERE id = ? AND parent_id = ? AND kind = 'floating'",
              tx.now(), ip_id, instance_id));
  return Ok();
}

Result<std::optional<ExternalIp>> EphemeralOfVersionIn(Tx& tx, const Uuid& instance_id,
                                                       IpVersion version) {
  for (const ExternalIp& e : FP_TRY(InstanceExternalIpsIn(tx, instance_id))) {
    if (e.kind == IpKind::kEphemeral && e.ip.version() == version) {
      return std::optional<ExternalIp>(e);
    }
  }
  return std::optional<ExternalIp>();
}

Result<IpPool> ResolvePoolIn(Tx& tx, const Uuid& silo_id, const PoolSelector& selector) {
  Uuid id = FP_TRY(ResolvePoolIdIn(tx, silo_id, selector));
  return LookupPoolIn(tx, NameOrId(id));
}

Result<ExternalIp> EphemeralAllocateIn(Tx& tx, const Uuid& ip_id, const Uuid& instance_id,
                                       const Uuid& silo_id, const PoolSelector& selector) {
  auto existing = FP_TRY(tx.QueryRow("SELECT time_deleted FROM external_ip WHERE id = ?", ip_id));
  if (existing) {
    if (!existing->IsNull(0)) {
      return Fail(Error::Internal("ephemeral IP allocation re-run after its row was released"));
    }
    return ExternalIpGetIn(tx, ip_id);
  }
  Uuid pool_id = FP_TRY(ResolvePoolIdIn(tx, silo_id, selector));
  auto lowest = AllocateLowestAddress(tx, pool_id);
  if (!lowest) return Fail(NoneFreeIn(tx, lowest.error(), pool_id, "for an ephemeral IP"));
  AllocatedAddress a = *lowest;
  QuotaHolder holder = FP_TRY(CheckInstanceIpQuotaIn(
      tx, instance_id, IpCharge{a.ip.version(), model::kQuartersPerAddress, "an ephemeral IP"}));
  FP_TRY(tx.Exec(
      "INSERT INTO external_ip (id, ip_pool_id, ip_pool_range_id, kind, ip, first_port, "
      "last_port, state, time_created, time_modified, quota_project_id, quota_silo_id) VALUES "
      "(?, ?, ?, 'ephemeral', ?, ?, ?, 'detached', ?, ?, ?, ?)",
      ip_id, pool_id, a.range_id, a.ip, a.first_port, a.last_port, tx.now(), tx.now(),
      holder.project_id, holder.silo_id));
  return ExternalIpGetIn(tx, ip_id);
}

}  // namespace fp::db
