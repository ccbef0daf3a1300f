#include "app/sagas/ip_steps.h"

#include "app/sagas/vm_steps.h"
#include "db/attach.h"
#include "loops/nat_reconciler.h"
#include "loops/sled_agents.h"

namespace fp::app {

namespace {

// The sled's port and the switches at once: the sled's call is sent, the switches are told, then
// the sled's answer is read, so that an attach or a detach waits for the slower of the two, not
// for both one after the other. Nothing is promised before the saga answers, so the order in
// which they take effect does not matter (a move's does: ProgramMove). If either fails, what
// was asked of the sled is undone (a call that failed may have been applied); the switches'
// side is the saga's undo (the NAT row).
Status ProgramPortAndNat(SagaDeps& d, const saga::ActionContext& ctx, const Uuid& instance_id,
                         const Uuid& sled_id, const IpAddr& ip, bool attach) {
  const agents::CallContext call = CallFor(ctx);
  agents::SledAgentClient* sled = FP_TRY(d.sled_agents.Sled(sled_id));
  auto port = sled->StartExternalIpChange(attach, instance_id, ip, call);
  Status synced = d.nat.SyncWith(call, ctx.saga_id());  // from the begin node's read
  Status changed = port->Finish();
  if (synced && changed) return Ok();
  Status undone = attach ? sled->RemoveExternalIp(instance_id, ip, call)
                         : sled->AddExternalIp(instance_id, ip, call);
  if (!undone) LogBestEffort(ctx, attach ? "sled remove" : "sled re-add", undone.error());
  return !synced ? synced : changed;
}

// A move: the new instance's port gains the address before the switches send it there, and
// the old instance's port loses it after. On failure undoes what it did on the new sled; the
// old one was not touched yet.
Status ProgramMove(SagaDeps& d, const saga::ActionContext& ctx, const Uuid& instance_id,
                   const IpBegun& begun) {
  const agents::CallContext call = CallFor(ctx);
  agents::SledAgentClient* sled = nullptr;
  if (begun.sled_id) {
    sled = FP_TRY(d.sled_agents.Sled(*begun.sled_id));
    if (Status added = sled->AddExternalIp(instance_id, begun.ip, call); !added) {
      if (auto s = sled->RemoveExternalIp(instance_id, begun.ip, call); !s) {
        LogBestEffort(ctx, "sled remove", s.error());
      }
      return added;
    }
  }
  if (Status synced = d.nat.SyncWith(call, ctx.saga_id()); !synced) {
    if (sled) {
      if (auto s = sled->RemoveExternalIp(instance_id, begun.ip, call); !s) {
        LogBestEffort(ctx, "sled remove", s.error());
      }
    }
    return synced;
  }
  if (begun.from_sled_id && begun.from_instance_id) {
    auto old = d.sled_agents.Sled(*begun.from_sled_id);
    if (!old) {
      LogBestEffort(ctx, "old sled remove", old.error());
    } else if (Status removed = (*old)->RemoveExternalIp(*begun.from_instance_id, begun.ip, call);
               !removed) {
      LogBestEffort(ctx, "old sled remove", removed.error());
    }
  }
  return Ok();
}

}  // namespace

IpBegun BegunOf(const db::AttachStep& step) {
  return IpBegun{
      .ip_id = step.ip.id,
      .do_saga = step.do_saga,
      .sled_id = step.sled ? std::optional<Uuid>(step.sled->id) : std::nullopt,
      .ip = step.ip.ip,
      .from_instance_id = step.from_instance,
      .from_sled_id = step.from_sled ? std::optional<Uuid>(step.from_sled->id) : std::nullopt};
}

Result<model::ExternalIp> IpOfOutcome(db::Datastore& ds, const saga::Json& output) {
  auto completed = FP_TRY(Decode<IpCompleted>(output, "output"));
  if (completed.ip) return *completed.ip;
  return ds.Read<model::ExternalIp>(
      [&](db::Tx& tx) { return db::ExternalIpGetIn(tx, completed.ip_id); });
}

Result<saga::Json> RunDataplane(SagaDeps& d, const saga::ActionContext& ctx,
                                const Uuid& instance_id, bool attach) {
  auto begun = FP_TRY(OutputOf<IpBegun>(ctx, "begin"));
  if (attach && begun.do_saga && begun.from_instance_id) {
    FP_CHECK_OK(ProgramMove(d, ctx, instance_id, begun));
    return saga::Json::object();
  }
  if (!begun.do_saga || !begun.sled_id) return saga::Json::object();
  FP_CHECK_OK(ProgramPortAndNat(d, ctx, instance_id, *begun.sled_id, begun.ip, attach));
  return saga::Json::object();
}

Status UndoPortChange(SagaDeps& d, const saga::ActionContext& ctx, const Uuid& instance_id,
                      bool was_attach) {
  auto begun = FP_TRY(OutputOf<IpBegun>(ctx, "begin"));
  if (!begun.do_saga || !begun.sled_id) return Ok();
  auto sled = d.sled_agents.Sled(*begun.sled_id);
  if (!sled) return Ok();
  const agents::CallContext call = CallFor(ctx);
  Status s = was_attach ? (*sled)->RemoveExternalIp(instance_id, begun.ip, call)
                        : (*sled)->AddExternalIp(instance_id, begun.ip, call);
  if (!s) LogBestEffort(ctx, was_attach ? "sled remove" : "sled re-add", s.error());
  return Ok();
}

}  // namespace fp::app
