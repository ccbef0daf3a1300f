#include "app/sagas/ip_detach.h"

#include "app/sagas/vm_steps.h"
#include "db/attach.h"
#include "db/instances.h"
#include "db/nat.h"
#include "db/sleds.h"
#include "loops/nat_reconciler.h"

namespace fp::app {

namespace {

using saga::Action;
using saga::ActionContext;
using saga::Json;

Result<Json> DetachBegin(SagaDeps& d, db::Tx& tx, const ActionContext& ctx) {
  auto p = FP_TRY(ParamsOf<IpDetachSagaParams>(ctx));
  db::AttachRequest req;
  req.instance_id = p.instance_id;
  req.saga_id = ctx.saga_id();
  req.kind =
      p.kind == model::IpKind::kEphemeral ? model::IpKind::kEphemeral : model::IpKind::kFloating;
  req.ip_id = p.ip_id;
  db::AttachStep step = FP_TRY(db::BeginDetachIn(tx, req));
  if (step.do_saga && step.sled) {
    FP_CHECK_OK(db::NatRemoveForIpIn(tx, step.ip));
    // The dataplane node pushes the removal from this read instead of reading the feed (on
    // PostgreSQL made right after the commit, in its exchange).
    FP_CHECK_OK(d.nat.ReadFeedAtCommitIn(tx, ctx.saga_id()));
  }
  return Json(BegunOf(step));
}

Status UndoDetachBegin(SagaDeps& d, const ActionContext& ctx) {
  auto begun = FP_TRY(OutputOf<IpBegun>(ctx, "begin"));
  if (!begun.do_saga) return Ok();
  auto p = FP_TRY(ParamsOf<IpDetachSagaParams>(ctx));
  FP_TRY(d.ds.Write<bool>([&](db::Tx& tx) -> Result<bool> {
    // Run again after a crash inside it, this undo may find the address detached since by a
    // later operation: it must not bring its NAT row back.
    if (!FP_TRY(db::IpHeldBySagaIn(tx, begun.ip_id, ctx.saga_id()))) return false;
    auto ip = FP_TRY(db::ExternalIpGetIn(tx, begun.ip_id));
    FP_TRY(db::CompleteOpIn(tx, begun.ip_id, model::AttachState::kDetaching,
                            model::AttachState::kAttached));
    if (begun.sled_id) {  // last: on PostgreSQL it goes with the commit
      const model::Sled sled = FP_TRY(db::SledGetIn(tx, *begun.sled_id));
      FP_CHECK_OK(db::NatEnsureForIpLaterIn(tx, ip, p.instance_id, sled));
    }
    return true;
  }));
  SyncNatBestEffort(d, ctx);
  return Ok();
}

Result<Json> DetachComplete(db::Tx& tx, const ActionContext& ctx) {
  auto begun = FP_TRY(OutputOf<IpBegun>(ctx, "begin"));
  model::ExternalIp ip =
      begun.do_saga ? FP_TRY(db::CompleteOpAndGetIn(tx, begun.ip_id, model::AttachState::kDetaching,
                                                    model::AttachState::kDetached))
                    : FP_TRY(db::ExternalIpGetIn(tx, begun.ip_id));
  return Json(IpDetachCompleted{begun.ip_id, begun.do_saga, std::move(ip)});
}

}  // namespace

std::vector<saga::Node> IpDetachNodes() {
  return {{"begin", "ip_detach.begin"},
          {"dataplane", "ip_detach.dataplane"},
          {"complete", "ip_detach.complete"}};
}

saga::SagaDag IpDetachSaga(const IpDetachSagaParams& params) {
  return saga::SagaDag{.name = kIpDetachSaga, .params = Json(params), .nodes = IpDetachNodes()};
}

void RegisterIpDetachActions(saga::ActionRegistry& r, SagaDeps& d) {
  r.Add(Action{
      .name = "ip_detach.begin",
      .run_in_tx = [&d](db::Tx& tx, const ActionContext& ctx) { return DetachBegin(d, tx, ctx); },
      .undo = [&d](const ActionContext& ctx) { return UndoDetachBegin(d, ctx); }});
  r.Add(DataplaneAction<IpDetachSagaParams>("ip_detach.dataplane", d, false));
  r.Add(Action{.name = "ip_detach.complete", .run_in_tx = InTx<DetachComplete>});  // as attach's
}

}  // namespace fp::app
