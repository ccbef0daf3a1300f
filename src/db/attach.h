#pragma once

// Attaching and detaching external IPs (omicron-behaviour.md §3): each begin/complete step is
// one transaction that decides from what it read, so the answer is right under concurrency.
// The IP row records the saga holding it in a transitional state (product.md difference 6).

#include <optional>

#include "db/datastore.h"
#include "db/instances.h"

namespace fp::db {

// External IPs one instance may hold besides its SNAT (the 32-IP limit of BeginAttachIn).
inline constexpr int64_t kMaxExternalIpsPerInstance = 32;

struct AttachStep {
  ExternalIp ip;
  bool do_saga = true;       // false: already done; the rest of the saga does nothing
  std::optional<Sled> sled;  // set when the instance runs on a sled (NAT and port work)
  // A move: the instance the IP was attached to, and its sled while it has a VMM.
  std::optional<Uuid> from_instance;
  std::optional<Sled> from_sled;
  // The instance's primary NIC where the begin read it (SQLite, an attach about to begin): its
  // NAT row is made from it without reading it again (NatEnsureForIpLaterIn's `nic`).
  std::optional<NetworkInterface> nic;
};

struct AttachRequest {
  Uuid ip_id;
  IpKind kind = IpKind::kFloating;
  Uuid instance_id;
  Uuid saga_id;
  bool creating = false;  // called from instance create: `creating` is a valid state
  // A floating IP attached to another instance moves from it (allow_reassociation).
  bool allow_move = false;
};

// detached -> attaching (parent = instance), or with `allow_move`, attached to another
// instance -> attaching (parent = instance, op_from_parent_id = the other). Errors, in the
// order they are decided: NotFound (instance, floating IP), InvalidRequest (attached elsewhere
// without allow_move, naming the holder), ServiceUnavailable (IP mid-operation, either instance
// migrating or between states), InvalidRequest (either instance's state, 32-IP limit, NIC
// without an address of the IP's version).
Result<AttachStep> BeginAttachIn(Tx& tx, const AttachRequest& r);

// What an attach by ids checks before its saga, in the transaction that would create it
// (saga::CreateCheck): the floating IP `ip_id` of the silo (its NotFound, or the read's
// failure, is the result's error) and the instance `instance_id` of the silo (its own result,
// so that the caller words its errors in the order it checks them). On PostgreSQL one
// statement; in a read, the read's last (Tx::QueryLast).
struct AttachTargets {
  ExternalIp ip;
  Result<Instance> instance;
};
Result<AttachTargets> FloatingIpAndInstanceByIdIn(Tx& tx, const Uuid& silo_id, const Uuid& ip_id,
                                                  const Uuid& instance_id);

// The undo of a move saga `saga_id` began on `ip_id` from instance `from`: while the saga
// still holds the IP, it goes back to `from`, attached, if that instance is live and could
// take it again (stopped, or running and not migrating, in the IP's project); otherwise it
// ends detached (the instance was deleted, stopped or started meanwhile). Says where it went;
// the caller puts the NAT row and the ports right.
struct MoveBack {
  bool held = false;             // false: the saga no longer held the IP; nothing changed
  std::optional<Uuid> instance;  // set when the IP went (or, not held, is) back on `from`
  std::optional<Sled> sled;      // `from`'s sled, when it runs on one
};
Result<MoveBack> UndoMoveIn(Tx& tx, const Uuid& ip_id, const Uuid& saga_id, const Uuid& from);
// attached -> detaching. `ip` absent for an ephemeral detach means "nothing to detach".
Result<AttachStep> BeginDetachIn(Tx& tx, const AttachRequest& r);

// Finishes or reverts a transition held by `saga_id`. Returns rows changed (0: already done).
// attaching -> attached: NotFound (the instance) if the IP was detached or deleted underneath
// by the instance's delete (so the saga unwinds).
// attaching -> detached, detaching -> detached: floating IPs lose their parent; ephemeral IPs
// are released back to their pool. detaching -> attached: restores the attachment.
Result<int64_t> CompleteOpIn(Tx& tx, const Uuid& ip_id, AttachState expected, AttachState target);
// CompleteOpIn, then the IP's row as the transaction leaves it (ExternalIpGetIn): what a saga's
// last node answers with. One statement on PostgreSQL.
Result<ExternalIp> CompleteOpAndGetIn(Tx& tx, const Uuid& ip_id, AttachState expected,
                                      AttachState target);

// Whether the attach or detach saga `saga_id` holds the IP (it is attaching or detaching under
// that saga). False once that operation completed or was undone, whatever happened to the IP
// since: an undo run again after a crash uses it to leave a later operation's IP alone.
Result<bool> IpHeldBySagaIn(Tx& tx, const Uuid& ip_id, const Uuid& saga_id);

// Undo of an attach made at instance create: a floating IP held by the instance goes back
// to detached (no parent). Idempotent.
Status ReleaseFloatingFromInstanceIn(Tx& tx, const Uuid& ip_id, const Uuid& instance_id);

// The instance's ephemeral IP of `version`, if any (any state).
Result<std::optional<ExternalIp>> EphemeralOfVersionIn(Tx& tx, const Uuid& instance_id,
                                                       IpVersion version);
// Allocates a detached ephemeral IP with id `ip_id` for instance `instance_id` from the pool
// `selector` names for the silo, within the IP quotas of the instance's project and silo; a
// re-run with the same id returns the same row (never a released one).
Result<ExternalIp> EphemeralAllocateIn(Tx& tx, const Uuid& ip_id, const Uuid& instance_id,
                                       const Uuid& silo_id, const PoolSelector& selector);
// The pool a selector names, as Oxide resolves it for the silo (errors as floating IP create).
Result<IpPool> ResolvePoolIn(Tx& tx, const Uuid& silo_id, const PoolSelector& selector);

}  // namespace fp::db
