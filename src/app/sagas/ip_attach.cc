#include "app/sagas/ip_attach.h"

#include "app/sagas/ip_steps.h"
#include "app/sagas/vm_steps.h"
#include "db/attach.h"
#include "db/instances.h"
#include "db/nat.h"
#include "loops/nat_reconciler.h"
#include "loops/sled_agents.h"

namespace fp::app {

namespace {

using saga::Action;
using saga::ActionContext;
using saga::Json;

Result<Json> Begin(SagaDeps& d, db::Tx& tx, const ActionContext& ctx) {
  auto p = FP_TRY(ParamsOf<IpAttachSagaParams>(ctx));
  db::AttachRequest req;
  req.instance_id = p.instance_id;
  req.saga_id = ctx.saga_id();
  req.ip_id = p.ip_id;
  req.allow_move = p.allow_reassociation;
  if (p.kind == model::IpKind::kEphemeral) {
    req.kind = model::IpKind::kEphemeral;
    // One ephemeral IP per version: an existing one is the answer (Oxide's idempotency).
    model::PoolSelector selector = SelectorOf(p.pool, p.ip_version);
    std::optional<IpVersion> version = selector.ip_version;
    if (selector.mode == model::PoolSelector::Mode::kExplicitPool) {
      version = FP_TRY(db::ResolvePoolIn(tx, p.silo_id, selector)).ip_version;
    }
    if (version) {
      if (auto existing = FP_TRY(db::EphemeralOfVersionIn(tx, p.instance_id, *version))) {
        if (existing->id != req.ip_id) {
          req.ip_id = existing->id;
          if (existing->state == model::AttachState::kAttached) {
            return Json(BegunOf(db::AttachStep{*existing, false, std::nullopt}));
          }
        }
      }
    }
    // Allocates under this saga's id, or returns the row already there (a re-run, or the
    // instance's existing ephemeral IP of this version).
    FP_TRY(db::EphemeralAllocateIn(tx, req.ip_id, p.instance_id, p.silo_id, selector));
  }
  db::AttachStep step = FP_TRY(db::BeginAttachIn(tx, req));
  if (step.do_saga && step.sled) {
    // A move's NAT row pointing at the old sled is replaced in this transaction: the switches
    // get the removal and the addition in one batch and retarget the address in one change.
    FP_CHECK_OK(db::NatEnsureForIpLaterIn(tx, step.ip, p.instance_id, *step.sled,
                                          step.nic ? &*step.nic : nullptr));
  } else if (step.do_saga && step.from_instance) {
    FP_CHECK_OK(db::NatRemoveForIpIn(tx, step.ip));  // moved to a stopped instance
  }
  // The dataplane node pushes the changes from this read instead of reading the feed (on
  // PostgreSQL made right after the commit, in its exchange).
  if (step.do_saga && (step.sled || step.from_instance)) {
    FP_CHECK_OK(d.nat.ReadFeedAtCommitIn(tx, ctx.saga_id()));
  }
  return Json(BegunOf(step));
}

// The undo of a move: the IP goes back to the instance it came from if that one can still
// take it, else it ends detached (db::UndoMoveIn); then the NAT row and both ports follow.
Status UndoMove(SagaDeps& d, const ActionContext& ctx, const IpBegun& begun) {
  const Uuid from = *begun.from_instance_id;
  auto back = FP_TRY(d.ds.Write<db::MoveBack>([&](db::Tx& tx) -> Result<db::MoveBack> {
    db::MoveBack out = FP_TRY(db::UndoMoveIn(tx, begun.ip_id, ctx.saga_id(), from));
    if (!out.held) return out;
    auto ip = FP_TRY(db::ExternalIpGetIn(tx, begun.ip_id));
    if (out.sled) {
      FP_CHECK_OK(db::NatEnsureForIpLaterIn(tx, ip, from, *out.sled));  // replaces the new row
    } else {
      FP_CHECK_OK(db::NatRemoveForIpIn(tx, ip));
    }
    return out;
  }));
  if (!back.held && !back.instance) {
    // Settled since by another operation (the new instance deleted): leave the NAT table and
    // the ports to it and the sled watcher.
    return Ok();
  }
  // Held, or back on `from` already (this undo ran before and the server died before its
  // port calls): the calls below are idempotent. The old port regains the address before the
  // switches are told to send it there.
  const agents::CallContext call = CallFor(ctx);
  if (back.sled) {
    if (auto sled = d.sled_agents.Sled(back.sled->id); sled) {
      if (Status s = (*sled)->AddExternalIp(from, begun.ip, call); !s) {
        LogBestEffort(ctx, "sled re-add", s.error());
      }
    }
  }
  SyncNatBestEffort(d, ctx);
  if (begun.sled_id) {
    // The new instance's port gives the address up, whatever the dataplane node got to (its
    // own cleanup does not run when it stopped after its effect).
    if (auto sled = d.sled_agents.Sled(*begun.sled_id); sled) {
      auto p = FP_TRY(ParamsOf<IpAttachSagaParams>(ctx));
      if (Status s = (*sled)->RemoveExternalIp(p.instance_id, begun.ip, call); !s) {
        LogBestEffort(ctx, "sled remove", s.error());
      }
    }
  }
  if (begun.from_sled_id && (!back.sled || back.sled->id != *begun.from_sled_id)) {
    if (auto sled = d.sled_agents.Sled(*begun.from_sled_id); sled) {
      if (Status s = (*sled)->RemoveExternalIp(from, begun.ip, call); !s) {
        LogBestEffort(ctx, "old sled remove", s.error());
      }
    }
  }
  return Ok();
}

Status UndoBegin(SagaDeps& d, const ActionContext& ctx) {
  auto begun = FP_TRY(OutputOf<IpBegun>(ctx, "begin"));
  if (!begun.do_saga) return Ok();
  if (begun.from_instance_id) return UndoMove(d, ctx, begun);
  FP_TRY(d.ds.Write<bool>([&](db::Tx& tx) -> Result<bool> {
    // Run again after a crash inside it, this undo may find the address attached since by a
    // later operation: its NAT row is not this saga's to remove.
    if (!FP_TRY(db::IpHeldBySagaIn(tx, begun.ip_id, ctx.saga_id()))) return false;
    auto ip = FP_TRY(db::ExternalIpGetIn(tx, begun.ip_id));
    FP_TRY(db::CompleteOpIn(tx, begun.ip_id, model::AttachState::kAttaching,
                            model::AttachState::kDetached));
    FP_CHECK_OK(db::NatRemoveForIpIn(tx, ip));  // last: on PostgreSQL it goes with the commit
    return true;
  }));
  SyncNatBestEffort(d, ctx);
  return Ok();
}

Result<Json> Complete(db::Tx& tx, const ActionContext& ctx) {
  auto p = FP_TRY(ParamsOf<IpAttachSagaParams>(ctx));
  auto begun = FP_TRY(OutputOf<IpBegun>(ctx, "begin"));
  if (!begun.do_saga) {
    return Json(IpCompleted{begun.ip_id, FP_TRY(db::ExternalIpGetIn(tx, begun.ip_id))});
  }
  auto done = db::CompleteOpAndGetIn(tx, begun.ip_id, model::AttachState::kAttaching,
                                     model::AttachState::kAttached);
  if (!done && done.error().kind() == ErrorKind::kNotFound) {
    // The instance was deleted underneath: answer as for a missing instance.
    return Fail(Error::NotFoundById("instance", p.instance_id.ToString()));
  }
  return Json(IpCompleted{begun.ip_id, FP_TRY(std::move(done))});
}

}  // namespace

std::vector<saga::Node> IpAttachNodes() {
  return {{"begin", "ip_attach.begin"},
          {"dataplane", "ip_attach.dataplane"},
          {"complete", "ip_attach.complete"}};
}

saga::SagaDag IpAttachSaga(const IpAttachSagaParams& params) {
  return saga::SagaDag{.name = kIpAttachSaga, .params = Json(params), .nodes = IpAttachNodes()};
}

void RegisterIpAttachActions(saga::ActionRegistry& r, SagaDeps& d) {
  // Its first transaction takes a NAT version without joining the write queue: on PostgreSQL
  // it waits only for the turn's lock, taken with its last exchange (db/nat.h).
  r.Add(
      Action{.name = "ip_attach.begin",
             .run_in_tx = [&d](db::Tx& tx, const ActionContext& ctx) { return Begin(d, tx, ctx); },
             .undo = [&d](const ActionContext& ctx) { return UndoBegin(d, ctx); }});
  r.Add(DataplaneAction<IpAttachSagaParams>("ip_attach.dataplane", d, true));
  // Nor does its last: on PostgreSQL concurrent completions collide under SERIALIZABLE
  // only where their rows share index pages (predicate locks are kept per page), which a
  // rack's many addresses make rare, and a completion that collides runs again in the queue.
  // Measured (README, "Completions out of the write queue"): with the benchmark's rows among
  // a rack's (`bench_attach --postgres URL --others 30`) 0.05 retries per cycle and 1.3 times
  // the cycles per second at 16 clients; with its 16 rows side by side in one page, each
  // completion collides once and the rate is unchanged.
  r.Add(Action{.name = "ip_attach.complete", .run_in_tx = InTx<Complete>});
}

}  // namespace fp::app
