#include "db/attach.h"

#include <fmt/format.h>

#include "db/external_ips.h"
#include "db/instances.h"

namespace fp::db {

namespace {

std::string_view KindLabel(IpKind k) { return k == IpKind::kSnat ? "SNAT" : ToString(k); }

// "floating IP "web"" or "ephemeral IP 10.0.0.5".
std::string Describe(const ExternalIp& ip) {
  if (ip.name) return fmt::format("{} IP \"{}\"", KindLabel(ip.kind), *ip.name);
  return fmt::format("{} IP {}", KindLabel(ip.kind), ip.ip.ToString());
}

Result<std::string> InstanceName(Tx& tx, const std::optional<Uuid>& id) {
  if (!id) return std::string("(none)");
  auto row = FP_TRY(tx.QueryRow("SELECT name FROM instance WHERE id = ?", *id));
  return row ? row->Text(0) : id->ToString();
}

Error MidOperation(const ExternalIp& ip, const std::string& holder) {
  return Error::Unavailable(fmt::format(
      "{} is being {} instance \"{}\"; retry when that operation completes", Describe(ip),
      ip.state == AttachState::kAttaching ? "attached to" : "detached from", holder));
}

// The checks on the instance shared by attach and detach (§3.2 rows on the instance), and by
// a move on the instance it moves from (`verb` "move": the checks of a detach).
Status CheckInstance(const Instance& i, const ExternalIp& ip, bool creating,
                     std::string_view verb) {
  if (i.migration_id) {
    return Fail(Error::Unavailable(
        fmt::format("instance \"{}\" is migrating; retry the {} of {} when the migration completes",
                    i.name, verb, Describe(ip))));
  }
  // A failed instance runs nowhere: its addresses can be detached, as from a stopped one
  // (Oxide allows it), so that it is no dead end; and moved away, which is how a floating IP
  // fails over to another instance.
  bool safe = i.state == InstanceState::kNoVmm || i.state == InstanceState::kVmm ||
              (creating && i.state == InstanceState::kCreating) ||
              (verb != "attach" && i.state == InstanceState::kFailed);
  if (!safe) {
    return Fail(Error::InvalidRequest(
        fmt::format("cannot {} {} IP {} instance in {} state", verb, KindLabel(ip.kind),
                    verb == "attach" ? "to" : "from", Label(i.state))));
  }
  if (i.state == InstanceState::kVmm && i.run_state != RunState::kRunning) {
    return Fail(Error::Unavailable(
        fmt::format("instance \"{}\" is {}; retry the {} of {} when it is running or stopped",
                    i.name, ToString(i.run_state), verb, Describe(ip))));
  }
  return Ok();
}

// What beginning an attach or a detach decides on, read in one snapshot. On SQLite by a few
// queries; on PostgreSQL by the one statement that also makes the transition when the checks
// pass (BeginStatement), so that the check and the change are one round trip.
struct BeginFacts {
  std::optional<Instance> instance;  // live
  std::optional<ExternalIp> ip;      // live, any kind
  std::optional<Uuid> op_saga;       // the saga holding the IP in a transition
  std::string holder;                // name of the IP's parent instance; "(none)" without one
  std::optional<Sled> sled;          // the instance's sled, while it has a VMM
  // The instance a move takes the IP from, and its sled while it has a VMM: read when the IP is
  // attached elsewhere and the request allows a move, or is being moved by this saga
  // (`op_from`, the IP's op_from_parent_id).
  std::optional<Uuid> op_from;
  std::optional<Instance> source;
  std::optional<Sled> source_sled;
  // Attach only: the instance's external IPs besides SNAT, whether its primary NIC has an
  // address of each version, and its lowest other ephemeral IP of the IP's version.
  int64_t external_ips = 0;
  bool nic_v4 = false;
  bool nic_v6 = false;
  std::optional<NetworkInterface> nic;  // the primary NIC, where read (SQLite)
  std::optional<IpAddr> other_ephemeral;
  // PostgreSQL only: the statement made the transition (its checks passed).
  bool changed = false;
};

enum class Verdict {
  kBegin,  // make the transition
  kMove,   // make the transition from the instance the IP is attached to (allow_move)
  kRerun,  // this saga made it already (its action runs again)
  kDone,   // nothing to do: already attached there / already detached
};

Result<std::optional<Sled>> SledOf(const BeginFacts& f) {
  const Instance& i = *f.instance;
  if (i.state != InstanceState::kVmm || !i.sled_id) return std::optional<Sled>();
  if (!f.sled) return Fail(Error::NotFoundById("sled", i.sled_id->ToString()));
  return f.sled;
}

Result<ExternalIp> IpFor(const BeginFacts& f, const AttachRequest& r, bool attach) {
  if (f.ip && f.ip->kind == r.kind) return *f.ip;
  if (r.kind == IpKind::kFloating) {
    return Fail(Error::NotFoundById("floating-ip", r.ip_id.ToString()));
  }
  if (attach) return Fail(Error::Internal("call-scoped ephemeral IP was lost"));
  return Fail(Error::InvalidRequest("instance does not have an ephemeral IP attached"));
}

Result<Verdict> DecideAttach(const BeginFacts& f, const AttachRequest& r) {
  if (!f.instance) return Fail(Error::NotFoundById("instance", r.instance_id.ToString()));
  const Instance& i = *f.instance;
  ExternalIp ip = FP_TRY(IpFor(f, r, true));
  if (ip.parent_id == i.id) {
    if (ip.state == AttachState::kAttached) return Verdict::kDone;
    if (ip.state == AttachState::kAttaching && f.op_saga == r.saga_id) return Verdict::kRerun;
  }
  bool move = false;
  if (ip.state == AttachState::kAttached) {
    if (!r.allow_move || ip.kind != IpKind::kFloating) {
      return Fail(Error::InvalidRequest(fmt::format(
          "{} IP cannot be attached to one instance while still attached to another: {} is "
          "attached to instance \"{}\"; detach it first{}",
          KindLabel(ip.kind), Describe(ip), f.holder,
          ip.kind == IpKind::kFloating && !r.creating
              ? ", or attach with \"allow_reassociation\": true to move it in one step"
              : "")));
    }
    if (!f.source) {
      return Fail(Error::Internal(
          fmt::format("{} is attached to instance {}, which is not live", Describe(ip), f.holder)));
    }
    FP_CHECK_OK(CheckInstance(*f.source, ip, false, "move"));
    move = true;
  } else if (ip.state != AttachState::kDetached) {
    return Fail(MidOperation(ip, f.holder));
  }
  // Checked by the request before it began too; again here, in the transaction that takes the
  // IP, since a floating IP can move to another project in between (FloatingIpTransfer).
  if (ip.kind == IpKind::kFloating && ip.project_id != i.project_id) {
    return Fail(Error::InvalidRequest("floating IP must be in the same project as the instance"));
  }
  FP_CHECK_OK(CheckInstance(i, ip, r.creating, "attach"));
  if (f.external_ips >= kMaxExternalIpsPerInstance) {
    return Fail(Error::InvalidRequest(
        fmt::format("an instance may not have more than {} external IP addresses",
                    kMaxExternalIpsPerInstance)));
  }
  if (!(ip.ip.version() == IpVersion::kV4 ? f.nic_v4 : f.nic_v6)) {
    std::string_view v = Label(ip.ip.version());
    return Fail(Error::InvalidRequest(fmt::format(
        "The {0} external IP is an {1} address, but the instance with ID {2} does not have a "
        "primary network interface with a VPC-private {1} address. Add a VPC-private {1} "
        "address to the interface, or attach a different IP address",
        KindLabel(ip.kind), v, i.id.ToString())));
  }
  if (ip.kind == IpKind::kEphemeral && f.other_ephemeral) {
    return Fail(Error::InvalidRequest(
        fmt::format("instance \"{}\" already has an ephemeral {} address ({})", i.name,
                    Label(ip.ip.version()), f.other_ephemeral->ToString())));
  }
  return move ? Verdict::kMove : Verdict::kBegin;
}

Result<Verdict> DecideDetach(const BeginFacts& f, const AttachRequest& r) {
  if (!f.instance) return Fail(Error::NotFoundById("instance", r.instance_id.ToString()));
  const Instance& i = *f.instance;
  ExternalIp ip = FP_TRY(IpFor(f, r, false));
  if (ip.state == AttachState::kDetached) return Verdict::kDone;
  if (ip.parent_id == i.id && ip.state == AttachState::kDetaching && f.op_saga == r.saga_id) {
    return Verdict::kRerun;
  }
  if (ip.state == AttachState::kAttached && ip.parent_id != i.id) {
    // A floating IP's detach names only the IP; a move took it elsewhere after the request read
    // its holder. Detaching it from there is what was asked: retry, not a refusal.
    return Fail(Error::Unavailable(
        fmt::format("{} moved to instance \"{}\" while this detach began; retry the detach",
                    Describe(ip), f.holder)));
  }
  if (ip.state != AttachState::kAttached) return Fail(MidOperation(ip, f.holder));
  FP_CHECK_OK(CheckInstance(i, ip, r.creating, "detach"));
  return Verdict::kBegin;
}

// Whether an attach would move the IP from the instance it is attached to.
bool Moving(const BeginFacts& f, const AttachRequest& r) {
  return r.allow_move && f.ip && f.instance && f.ip->state == AttachState::kAttached &&
         f.ip->parent_id && *f.ip->parent_id != f.instance->id;
}

// The instance a move takes the IP from (for a move about to begin, its parent; for one this
// saga began, op_from_parent_id) and its sled, on both engines: one more read, for moves only.
Status ReadMoveSourceIn(Tx& tx, const AttachRequest& r, BeginFacts& f) {
  std::optional<Uuid> source;
  if (Moving(f, r)) {
    source = f.ip->parent_id;
  } else if (f.ip && f.ip->state == AttachState::kAttaching && f.op_saga == r.saga_id) {
    source = f.op_from;
  }
  if (!source) return Ok();
  auto row = FP_TRY(
      tx.QueryRow(fmt::format("SELECT {} FROM instance i WHERE i.id = ? AND i.time_deleted IS NULL",
                              kInstanceColumns),
                  *source));
  if (!row) return Ok();
  f.source = FP_TRY(InstanceFromRow(*row));
  if (f.source->state == InstanceState::kVmm && f.source->sled_id) {
    auto sled = FP_TRY(tx.QueryRow(
        fmt::format("SELECT {} FROM sled s WHERE s.id = ?", kSledColumns), *f.source->sled_id));
    if (sled) f.source_sled = FP_TRY(SledFromRow(*sled));
  }
  return Ok();
}

// SQLite: the facts by a few queries, in the transaction's snapshot.
Result<BeginFacts> ReadBeginFacts(Tx& tx, const AttachRequest& r, bool attach) {
  BeginFacts f;
  auto inst = FP_TRY(
      tx.QueryRow(fmt::format("SELECT {} FROM instance i WHERE i.id = ? AND i.time_deleted IS NULL",
                              kInstanceColumns),
                  r.instance_id));
  if (!inst) return f;
  f.instance = FP_TRY(InstanceFromRow(*inst));
  auto ip = FP_TRY(tx.QueryRow(
      fmt::format("SELECT {}, e.op_saga_id, e.op_from_parent_id FROM external_ip e WHERE e.id = ? "
                  "AND e.time_deleted IS NULL",
                  kExternalIpColumns),
      r.ip_id));
  if (!ip) return f;
  f.ip = FP_TRY(ExternalIpFromRow(*ip));
  f.op_saga = FP_TRY(OptUuidColumn(*ip, kExternalIpColumnCount));
  f.op_from = FP_TRY(OptUuidColumn(*ip, kExternalIpColumnCount + 1));
  const Instance& i = *f.instance;
  // The IP's holder is most often the instance itself (a detach, a rerun): its name is read.
  f.holder = f.ip->parent_id == i.id ? i.name : FP_TRY(InstanceName(tx, f.ip->parent_id));
  if (i.state == InstanceState::kVmm && i.sled_id) {
    auto sled = FP_TRY(
        tx.QueryRow(fmt::format("SELECT {} FROM sled s WHERE s.id = ?", kSledColumns), *i.sled_id));
    if (sled) f.sled = FP_TRY(SledFromRow(*sled));
  }
  if (!attach || (f.ip->state != AttachState::kDetached && !Moving(f, r))) return f;
  f.nic = FP_TRY(PrimaryNicIn(tx, i.id));
  if (f.nic) {
    f.nic_v4 = f.nic->ipv4.has_value();
    f.nic_v6 = f.nic->ipv6.has_value();
  }
  // The instance's live IPs, read once: how many it has besides SNAT, and its other ephemeral.
  for (const ExternalIp& e : FP_TRY(InstanceExternalIpsIn(tx, i.id))) {
    if (e.kind != IpKind::kSnat) ++f.external_ips;
    if (e.kind == IpKind::kEphemeral && e.id != f.ip->id && e.ip.version() == f.ip->ip.version() &&
        (!f.other_ephemeral || e.ip < *f.other_ephemeral)) {
      f.other_ephemeral = e.ip;
    }
  }
  return f;
}

// PostgreSQL: one statement reads the facts and, when the checks pass, makes the transition
// (the `t` CTE). Its conditions are DecideAttach's and DecideDetach's, written in SQL; the
// caller decides again from the facts it returns (for the error messages) and treats any
// disagreement as an internal error. Parameters, in order: instance id, IP id, saga id, now,
// the IP's kind, creating (0/1).
std::string BeginStatement(bool attach) {
  constexpr std::string_view kInstanceCanChange =
      "inst.migration_id IS NULL AND (inst.state = 'no_vmm' OR (inst.state = 'vmm' AND "
      "inst.run_state = 'running') OR (? = 1 AND inst.state = 'creating'))";
  constexpr std::string_view kInstanceCanDetach =
      "inst.migration_id IS NULL AND (inst.state IN ('no_vmm', 'failed') OR (inst.state = 'vmm' "
      "AND inst.run_state = 'running') OR (? = 1 AND inst.state = 'creating'))";
  std::string facts =
      attach ? "f AS (SELECT (SELECT count(*) FROM external_ip x WHERE x.parent_id = inst.id AND "
               "x.time_deleted IS NULL AND x.kind <> 'snat') AS external_ips, "
               "nic.ipv4 IS NOT NULL AS v4, nic.ipv6 IS NOT NULL AS v6, "
               "(SELECT x.ip FROM external_ip x WHERE x.parent_id = inst.id AND x.time_deleted IS "
               "NULL AND x.kind = 'ephemeral' AND x.id <> ip.id AND get_byte(x.ip, 0) = "
               "get_byte(ip.ip, 0) ORDER BY x.ip LIMIT 1) AS other_ephemeral "
               "FROM inst CROSS JOIN ip LEFT JOIN network_interface nic ON nic.instance_id = "
               "inst.id AND nic.is_primary = 1 AND nic.time_deleted IS NULL)"
             : "f AS (SELECT 0 AS external_ips, false AS v4, false AS v6, "
               "NULL::bytea AS other_ephemeral)";
  std::string transition =
      attach
          ? fmt::format(
                "t AS (UPDATE external_ip u SET parent_id = inst.id, state = 'attaching', "
                "op_saga_id = ?, op_from_parent_id = NULL, time_modified = ? FROM inst, ip, f "
                "WHERE u.id = ip.id AND "
                "u.state = 'detached' AND ip.kind = ? AND ip.state = 'detached' AND "
                "(ip.kind <> 'floating' OR ip.project_id = inst.project_id) AND {} AND "
                "f.external_ips < {} AND "
                "CASE get_byte(ip.ip, 0) WHEN 4 THEN f.v4 ELSE f.v6 END AND "
                "(ip.kind <> 'ephemeral' OR f.other_ephemeral IS NULL) RETURNING 1)",
                kInstanceCanChange, kMaxExternalIpsPerInstance)
          : fmt::format(
                "t AS (UPDATE external_ip u SET state = 'detaching', op_saga_id = ?, "
                "time_modified = ? FROM inst, ip WHERE u.id = ip.id AND u.state = 'attached' AND "
                "ip.kind = ? AND ip.state = 'attached' AND ip.parent_id = inst.id AND {} RETURNING "
                "1)",
                kInstanceCanDetach);
  return fmt::format(
      "WITH inst AS (SELECT {} FROM instance i WHERE i.id = ? AND i.time_deleted IS NULL), "
      "ip AS (SELECT {}, e.op_saga_id, e.op_from_parent_id FROM external_ip e WHERE e.id = ? AND "
      "e.time_deleted IS NULL), {}, {} "
      "SELECT inst.*, ip.*, coalesce((SELECT h.name FROM instance h WHERE h.id = ip.parent_id), "
      "ip.parent_id, '(none)'), f.external_ips, f.v4, f.v6, f.other_ephemeral, {}, "
      "(SELECT count(*) FROM t) "
      "FROM (SELECT 1) one LEFT JOIN inst ON true LEFT JOIN ip ON true LEFT JOIN f ON true "
      "LEFT JOIN sled s ON inst.state = 'vmm' AND s.id = inst.sled_id",
      kInstanceColumns, kExternalIpColumns, facts, transition, kSledColumns);
}

Result<BeginFacts> BeginOnPostgres(Tx& tx, const AttachRequest& r, bool attach) {
  static const std::string kAttach = BeginStatement(true);
  static const std::string kDetach = BeginStatement(false);
  auto rows = FP_TRY(tx.Query(attach ? kAttach : kDetach, r.instance_id, r.ip_id, r.saga_id,
                              tx.now(), ToString(r.kind), r.creating));
  const Row& row = rows.at(0);
  BeginFacts f;
  size_t at = 0;
  if (!row.IsNull(at)) f.instance = FP_TRY(InstanceFromRow(row.Slice(at, kInstanceColumnCount)));
  at += kInstanceColumnCount;
  if (!row.IsNull(at)) {
    f.ip = FP_TRY(ExternalIpFromRow(row.Slice(at, kExternalIpColumnCount)));
  }
  at += kExternalIpColumnCount;
  f.op_saga = FP_TRY(OptUuidColumn(row, at++));
  f.op_from = FP_TRY(OptUuidColumn(row, at++));
  f.holder = row.Text(at++);
  f.external_ips = row.Int(at++);
  f.nic_v4 = row.Int(at++) != 0;
  f.nic_v6 = row.Int(at++) != 0;
  if (!row.IsNull(at)) f.other_ephemeral = FP_TRY(IpColumn(row, at));
  ++at;
  if (!row.IsNull(at)) f.sled = FP_TRY(SledFromRow(row.Slice(at, kSledColumnCount)));
  at += kSledColumnCount;
  f.changed = row.Int(at) == 1;
  return f;
}

// Both begins: the facts, the verdict, the transition.
Result<AttachStep> Begin(Tx& tx, const AttachRequest& r, bool attach) {
  BeginFacts f =
      FP_TRY(tx.postgres() ? BeginOnPostgres(tx, r, attach) : ReadBeginFacts(tx, r, attach));
  if (attach) FP_CHECK_OK(ReadMoveSourceIn(tx, r, f));
  Result<Verdict> verdict = attach ? DecideAttach(f, r) : DecideDetach(f, r);
  bool begin = verdict && *verdict == Verdict::kBegin;
  if (tx.postgres() && f.changed != begin) {
    // Rolled back by the error: the statement's SQL and the checks here must say the same.
    return Fail(Error::Internal(fmt::format(
        "{} of {}: the statement {} the transition but the checks {}", attach ? "attach" : "detach",
        r.ip_id.ToString(), f.changed ? "made" : "did not make",
        verdict ? "allow it" : "refuse it: " + verdict.error().message())));
  }
  if (!verdict) return Fail(verdict.error());
  ExternalIp ip = *f.ip;
  if (*verdict == Verdict::kDone) {
    return AttachStep{ip, false, attach ? FP_TRY(SledOf(f)) : std::nullopt};
  }
  if (*verdict == Verdict::kMove) {
    // Not made by PostgreSQL's statement (it changes only detached IPs): the facts were read in
    // this transaction, which is serializable there, so the change can follow them.
    int64_t moved = FP_TRY(
        tx.Exec("UPDATE external_ip SET parent_id = ?, state = 'attaching', op_saga_id = ?, "
                "op_from_parent_id = ?, time_modified = ? WHERE id = ? AND state = 'attached' AND "
                "parent_id = ? AND time_deleted IS NULL",
                f.instance->id, r.saga_id, f.source->id, tx.now(), ip.id, f.source->id));
    if (moved != 1) {
      return Fail(
          Error::Internal(fmt::format("moving {} changed {} rows", ip.id.ToString(), moved)));
    }
  }
  if (*verdict == Verdict::kBegin && !tx.postgres()) {
    if (attach) {
      FP_TRY(
          tx.Exec("UPDATE external_ip SET parent_id = ?, state = 'attaching', op_saga_id = ?, "
                  "op_from_parent_id = NULL, time_modified = ? WHERE id = ?",
                  f.instance->id, r.saga_id, tx.now(), ip.id));
    } else {
      FP_TRY(
          tx.Exec("UPDATE external_ip SET state = 'detaching', op_saga_id = ?, time_modified = ? "
                  "WHERE id = ?",
                  r.saga_id, tx.now(), ip.id));
    }
  }
  if (*verdict == Verdict::kBegin || *verdict == Verdict::kMove) {
    ip.parent_id = f.instance->id;
    ip.state = attach ? AttachState::kAttaching : AttachState::kDetaching;
  }
  AttachStep step{ip, true, FP_TRY(SledOf(f))};
  step.nic = f.nic;
  if (f.source && (*verdict == Verdict::kMove || *verdict == Verdict::kRerun)) {
    step.from_instance = f.source->id;
    step.from_sled = f.source_sled;
  } else if (f.op_from && *verdict == Verdict::kRerun) {
    step.from_instance = f.op_from;  // moved from an instance deleted since
  }
  return step;
}

}  // namespace

Result<AttachTargets> FloatingIpAndInstanceByIdIn(Tx& tx, const Uuid& silo_id, const Uuid& ip_id,
                                                  const Uuid& instance_id) {
  // On PostgreSQL one statement (one round trip): FloatingIpLookupByIdIn's row beside
  // InstanceByIdIn's, each NULL when not found.
  static const std::string kBoth = fmt::format(
      "SELECT x.*, y.* FROM (SELECT 1) one LEFT JOIN (SELECT {} FROM external_ip e JOIN project "
      "pr ON pr.id = e.project_id WHERE e.id = ? AND e.kind = 'floating' AND e.time_deleted IS "
      "NULL AND pr.silo_id = ? AND pr.time_deleted IS NULL) x ON true LEFT JOIN (SELECT {} FROM "
      "instance i JOIN project p ON p.id = i.project_id WHERE i.id = ? AND i.time_deleted IS "
      "NULL AND p.silo_id = ? AND p.time_deleted IS NULL) y ON true",
      kExternalIpColumns, kInstanceColumns);
  if (!tx.postgres()) {
    // SQLite would build a temporary b-tree for each side of the join; two lookups by key
    // cost less, and a statement more is no round trip in the process.
    ExternalIp ip = FP_TRY(FloatingIpLookupByIdIn(tx, silo_id, ip_id));
    Result<Instance> instance = InstanceByIdIn(tx, silo_id, instance_id);
    if (!instance && instance.error().kind() != ErrorKind::kNotFound) {
      return Fail(instance.error());
    }
    return AttachTargets{std::move(ip), std::move(instance)};
  }
  auto rows = FP_TRY(tx.QueryLast(kBoth, ip_id, silo_id, instance_id, silo_id));
  const Row& row = rows.at(0);
  if (row.IsNull(0)) return Fail(Error::NotFoundById("floating-ip", ip_id.ToString()));
  ExternalIp ip = FP_TRY(ExternalIpFromRow(row.Slice(0, kExternalIpColumnCount)));
  if (row.IsNull(kExternalIpColumnCount)) {
    return AttachTargets{std::move(ip),
                         Fail(Error::NotFoundById("instance", instance_id.ToString()))};
  }
  return AttachTargets{std::move(ip),
                       InstanceFromRow(row.Slice(kExternalIpColumnCount, kInstanceColumnCount))};
}

Result<AttachStep> BeginAttachIn(Tx& tx, const AttachRequest& r) { return Begin(tx, r, true); }

Result<AttachStep> BeginDetachIn(Tx& tx, const AttachRequest& r) { return Begin(tx, r, false); }

}  // namespace fp::db
