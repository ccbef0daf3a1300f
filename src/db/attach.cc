#include "db/attach.h"

#include <fmt/format.h>

#include "db/external_ips.h"
#include "db/ip_allocation.h"
#include "db/ip_pools.h"

namespace fp::db {

namespace {

constexpr int64_t kMaxExternalIps = 32;  // besides the instance's SNAT

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

// The checks on the instance shared by attach and detach (§3.2 rows on the instance).
Status CheckInstance(const Instance& i, const ExternalIp& ip, bool creating,
                     std::string_view verb) {
  if (i.migration_id) {
    return Fail(Error::Unavailable(
        fmt::format("instance \"{}\" is migrating; retry {} of {} when the migration completes",
                    i.name, verb == "attach" ? "the attach" : "the detach", Describe(ip))));
  }
  bool safe = i.state == InstanceState::kNoVmm || i.state == InstanceState::kVmm ||
              (creating && i.state == InstanceState::kCreating);
  if (!safe) {
    return Fail(Error::InvalidRequest(
        fmt::format("cannot {} {} IP {} instance in {} state", verb, KindLabel(ip.kind),
                    verb == "attach" ? "to" : "from", Label(i.state))));
  }
  if (i.state == InstanceState::kVmm && i.run_state != "running") {
    return Fail(Error::Unavailable(
        fmt::format("instance \"{}\" is {}; retry the {} of {} when it is running or stopped",
                    i.name, i.run_state, verb, Describe(ip))));
  }
  return Ok();
}

Result<std::optional<Sled>> SledOf(Tx& tx, const Instance& i) {
  if (i.state != InstanceState::kVmm || !i.sled_id) return std::optional<Sled>();
  return std::optional<Sled>(FP_TRY(SledGetIn(tx, *i.sled_id)));
}

Result<std::optional<ExternalIp>> LiveIp(Tx& tx, const Uuid& id) {
  auto live =
      FP_TRY(tx.QueryRow("SELECT 1 FROM external_ip WHERE id = ? AND time_deleted IS NULL", id));
  if (!live) return std::optional<ExternalIp>();
  return std::optional<ExternalIp>(FP_TRY(ExternalIpGetIn(tx, id)));
}

Result<std::optional<Uuid>> OpSaga(Tx& tx, const Uuid& id) {
  auto row = FP_TRY(tx.QueryRow("SELECT op_saga_id FROM external_ip WHERE id = ?", id));
  if (!row || row->IsNull(0)) return std::optional<Uuid>();
  return OptUuidColumn(*row, 0);
}

}  // namespace

Result<AttachStep> BeginAttachIn(Tx& tx, const AttachRequest& r) {
  Instance i = FP_TRY(InstanceGetIn(tx, r.instance_id));
  auto found = FP_TRY(LiveIp(tx, r.ip_id));
  if (!found || found->kind != r.kind) {
    if (r.kind == IpKind::kFloating)
      return Fail(Error::NotFoundById("floating-ip", r.ip_id.ToString()));
    return Fail(Error::Internal("call-scoped ephemeral IP was lost"));
  }
  ExternalIp ip = *found;
  if (ip.parent_id == i.id) {
    if (ip.state == AttachState::kAttached) return AttachStep{ip, false, FP_TRY(SledOf(tx, i))};
    if (ip.state == AttachState::kAttaching && FP_TRY(OpSaga(tx, ip.id)) == r.saga_id) {
      return AttachStep{ip, true, FP_TRY(SledOf(tx, i))};  // this saga, re-run
    }
  }
  if (ip.state == AttachState::kAttached) {
    return Fail(Error::InvalidRequest(fmt::format(
        "{} IP cannot be attached to one instance while still attached to another: {} is "
        "attached to instance \"{}\"; detach it first",
        KindLabel(ip.kind), Describe(ip), FP_TRY(InstanceName(tx, ip.parent_id)))));
  }
  if (ip.state != AttachState::kDetached) {
    return Fail(MidOperation(ip, FP_TRY(InstanceName(tx, ip.parent_id))));
  }
  FP_CHECK_OK(CheckInstance(i, ip, r.creating, "attach"));
  auto count = FP_TRY(tx.QueryRow(
      "SELECT count(*) FROM external_ip WHERE parent_id = ? AND time_deleted IS NULL AND "
      "kind != 'snat'",
      i.id));
  if (count->Int(0) >= kMaxExternalIps) {
    return Fail(Error::InvalidRequest(fmt::format(
        "an instance may not have more than {} external IP addresses", kMaxExternalIps)));
  }
  auto nic = FP_TRY(PrimaryNicIn(tx, i.id));
  bool has_stack =
      nic && (ip.ip.version() == IpVersion::kV4 ? nic->ipv4.has_value() : nic->ipv6.has_value());
  if (!has_stack) {
    std::string_view v = Label(ip.ip.version());
    return Fail(Error::InvalidRequest(fmt::format(
        "The {0} external IP is an {1} address, but the instance with ID {2} does not have a "
        "primary network interface with a VPC-private {1} address. Add a VPC-private {1} "
        "address to the interface, or attach a different IP address",
        KindLabel(ip.kind), v, i.id.ToString())));
  }
  if (ip.kind == IpKind::kEphemeral) {
    auto other = FP_TRY(EphemeralOfVersionIn(tx, i.id, ip.ip.version()));
    if (other && other->id != ip.id) {
      return Fail(Error::InvalidRequest(
          fmt::format("instance \"{}\" already has an ephemeral {} address ({})", i.name,
                      Label(ip.ip.version()), other->ip.ToString())));
    }
  }
  FP_TRY(
      tx.Exec("UPDATE external_ip SET parent_id = ?, state = 'attaching', op_saga_id = ?, "
              "time_modified = ? WHERE id = ?",
              i.id, r.saga_id, tx.now(), ip.id));
  ip.parent_id = i.id;
  ip.state = AttachState::kAttaching;
  return AttachStep{ip, true, FP_TRY(SledOf(tx, i))};
}

Result<AttachStep> BeginDetachIn(Tx& tx, const AttachRequest& r) {
  Instance i = FP_TRY(InstanceGetIn(tx, r.instance_id));
  auto found = FP_TRY(LiveIp(tx, r.ip_id));
  if (!found || found->kind != r.kind) {
    if (r.kind == IpKind::kFloating)
      return Fail(Error::NotFoundById("floating-ip", r.ip_id.ToString()));
    return Fail(Error::InvalidRequest("instance does not have an ephemeral IP attached"));
  }
  ExternalIp ip = *found;
  if (ip.state == AttachState::kDetached) return AttachStep{ip, false, std::nullopt};
  if (ip.parent_id == i.id && ip.state == AttachState::kDetaching &&
      FP_TRY(OpSaga(tx, ip.id)) == r.saga_id) {
    return AttachStep{ip, true, FP_TRY(SledOf(tx, i))};
  }
  if (ip.state == AttachState::kAttached && ip.parent_id != i.id) {
    return Fail(Error::InvalidRequest(fmt::format(
        "{} IP is not attached to the target instance: {} is attached to instance \"{}\"",
        KindLabel(ip.kind), Describe(ip), FP_TRY(InstanceName(tx, ip.parent_id)))));
  }
  if (ip.state != AttachState::kAttached) {
    return Fail(MidOperation(ip, FP_TRY(InstanceName(tx, ip.parent_id))));
  }
  FP_CHECK_OK(CheckInstance(i, ip, r.creating, "detach"));
  FP_TRY(tx.Exec(
      "UPDATE external_ip SET state = 'detaching', op_saga_id = ?, time_modified = ? WHERE id = ?",
      r.saga_id, tx.now(), ip.id));
  ip.state = AttachState::kDetaching;
  return AttachStep{ip, true, FP_TRY(SledOf(tx, i))};
}

Result<int64_t> CompleteOpIn(Tx& tx, const Uuid& ip_id, AttachState expected, AttachState target) {
  if (expected != AttachState::kAttaching && expected != AttachState::kDetaching) {
    return Fail(Error::Internal(
        fmt::format("{} is not a valid transition state for attach/detach", ToString(expected))));
  }
  auto row =
      FP_TRY(tx.QueryRow("SELECT kind, state, time_deleted FROM external_ip WHERE id = ?", ip_id));
  if (!row) return Fail(Error::NotFoundById("external-ip", ip_id.ToString()));
  std::string state = row->Text(1);
  bool deleted = !row->IsNull(2);
  if (deleted || state != ToString(expected)) {
    if (expected == AttachState::kAttaching && target == AttachState::kAttached &&
        (deleted || state == "detached")) {
      // The instance was deleted while the IP was being attached (its delete detaches every
      // IP): the attach fails and its saga unwinds. A client error, not an internal one.
      return Fail(Error::NotFound(
          "instance (it was deleted while the external IP was being attached to it)"));
    }
    return int64_t{0};
  }
  bool ephemeral = row->Text(0) == "ephemeral";
  if (target == AttachState::kDetached) {
    if (ephemeral) {
      FP_CHECK_OK(ExternalIpReleaseIn(tx, ip_id));
    } else {
      FP_TRY(
          tx.Exec("UPDATE external_ip SET state = 'detached', parent_id = NULL, op_saga_id = NULL, "
                  "time_modified = ? WHERE id = ?",
                  tx.now(), ip_id));
    }
    return int64_t{1};
  }
  return tx.Exec(
      "UPDATE external_ip SET state = ?, op_saga_id = NULL, time_modified = ? WHERE id = ?",
      ToString(target), tx.now(), ip_id);
}

Result<bool> IpHeldBySagaIn(Tx& tx, const Uuid& ip_id, const Uuid& saga_id) {
  // A released ephemeral row keeps its op_saga_id: only a live row in transition counts.
  auto row = FP_TRY(
      tx.QueryRow("SELECT 1 FROM external_ip WHERE id = ? AND op_saga_id = ? AND time_deleted IS "
                  "NULL AND state IN ('attaching', 'detaching')",
                  ip_id, saga_id));
  return row.has_value();
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

Result<ExternalIp> EphemeralAllocateIn(Tx& tx, const Uuid& ip_id, const Uuid& silo_id,
                                       const PoolSelector& selector) {
  auto existing = FP_TRY(tx.QueryRow("SELECT time_deleted FROM external_ip WHERE id = ?", ip_id));
  if (existing) {
    if (!existing->IsNull(0)) {
      return Fail(Error::Internal("ephemeral IP allocation re-run after its row was released"));
    }
    return ExternalIpGetIn(tx, ip_id);
  }
  Uuid pool_id = FP_TRY(ResolvePoolIdIn(tx, silo_id, selector));
  AllocatedAddress a = FP_TRY(AllocateLowestAddress(tx, pool_id));
  FP_TRY(tx.Exec(
      "INSERT INTO external_ip (id, ip_pool_id, ip_pool_range_id, kind, ip, first_port, "
      "last_port, state, time_created, time_modified) VALUES (?, ?, ?, 'ephemeral', ?, ?, ?, "
      "'detached', ?, ?)",
      ip_id, pool_id, a.range_id, a.ip, a.first_port, a.last_port, tx.now(), tx.now()));
  return ExternalIpGetIn(tx, ip_id);
}

}  // namespace fp::db
