#include "app/sagas/instance_start.h"

#include "app/sagas/vm_steps.h"
#include "db/attach.h"
#include "db/instances.h"
#include "db/nat.h"
#include "db/sleds.h"
#include "loops/nat_reconciler.h"
#include "loops/sled_agents.h"

namespace fp::app {

namespace {

using saga::Action;
using saga::ActionContext;
using saga::Json;

struct NatWritten {
  size_t nat_entries = 0;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(NatWritten, nat_entries)

}  // namespace

std::vector<saga::Node> InstanceStartNodes() {
  return {{"place", "instance_start.place"},
          {"nat", "instance_start.nat"},
          {"sled", "instance_start.sled"},
          {"switch", "instance_start.switch"}};
}

saga::SagaDag InstanceStartSaga(const InstanceStartSagaParams& params) {
  return saga::SagaDag{
      .name = kInstanceStartSaga, .params = Json(params), .nodes = InstanceStartNodes()};
}

void RegisterInstanceStartActions(saga::ActionRegistry& r, SagaDeps& d) {
  r.Add(Action{.name = "instance_start.place",
               .run_in_tx = [&d](db::Tx& tx, const ActionContext& ctx) -> Result<Json> {
                 auto p = FP_TRY(ParamsOf<InstanceStartSagaParams>(ctx));
                 // A re-run keeps the placement this saga made (placement is not deterministic).
                 model::Instance i = FP_TRY(db::InstanceGetIn(tx, p.instance_id));
                 if (i.start_saga_id == ctx.saga_id() && i.sled_id) {
                   return Json(InstancePlaced{*i.sled_id});
                 }
                 std::vector<Uuid> candidates;
                 for (const auto& [id, client] : d.sled_agents.sleds) candidates.push_back(id);
                 Uuid sled = FP_TRY(db::PickSledIn(tx, candidates));
                 FP_TRY(db::InstanceBeginStartIn(tx, p.instance_id, sled, ctx.saga_id()));
                 return Json(InstancePlaced{sled});
               },
               .undo_in_tx = [](db::Tx& tx, const ActionContext& ctx) -> Status {
                 auto p = FP_TRY(ParamsOf<InstanceStartSagaParams>(ctx));
                 auto placed = FP_TRY(OutputOf<InstancePlaced>(ctx, "place"));
                 return db::InstanceUndoStartIn(tx, p.instance_id, placed.sled_id);
               }});
  r.Add(Action{.name = "instance_start.nat",
               .run_in_tx = [&d](db::Tx& tx, const ActionContext& ctx) -> Result<Json> {
                 auto p = FP_TRY(ParamsOf<InstanceStartSagaParams>(ctx));
                 auto placed = FP_TRY(OutputOf<InstancePlaced>(ctx, "place"));
                 model::Sled sled = FP_TRY(db::SledGetIn(tx, placed.sled_id));
                 const size_t rows = FP_TRY(db::NatEnsureForInstanceIn(tx, p.instance_id, sled));
                 // The switch node pushes the changes from this read (SyncWith; on
                 // PostgreSQL made right after the commit, in its exchange).
                 if (rows > 0) FP_CHECK_OK(d.nat.ReadFeedAtCommitIn(tx, ctx.saga_id()));
                 return Json(NatWritten{rows});
               },
               .undo = [&d](const ActionContext& ctx) -> Status {
                 auto p = FP_TRY(ParamsOf<InstanceStartSagaParams>(ctx));
                 FP_TRY(d.ds.Write<bool>([&](db::Tx& tx) -> Result<bool> {
                   FP_CHECK_OK(db::NatRemoveForInstanceIn(tx, p.instance_id));
                   return true;
                 }));
                 SyncNatBestEffort(d, ctx);
                 return Ok();
               }});
  r.Add(Action{.name = "instance_start.sled",
               .run = [&d](const ActionContext& ctx) -> Result<Json> {
                 auto p = FP_TRY(ParamsOf<InstanceStartSagaParams>(ctx));
                 auto placed = FP_TRY(OutputOf<InstancePlaced>(ctx, "place"));
                 return Json(FP_TRY(EnsureRunningOn(d, ctx, p.instance_id, placed.sled_id)));
               },
               .undo = [&d](const ActionContext& ctx) -> Status {
                 auto p = FP_TRY(ParamsOf<InstanceStartSagaParams>(ctx));
                 auto placed = FP_TRY(OutputOf<InstancePlaced>(ctx, "place"));
                 UnregisterFrom(d, ctx, p.instance_id, placed.sled_id);
                 return Ok();
               }});
  r.Add(Action{.name = "instance_start.switch",
               .run = [&d](const ActionContext& ctx) -> Result<Json> {
                 // From the nat node's read when it wrote rows (and so made one); else a Sync of
                 // its own, as the push of an instance without addresses always was.
                 auto written = FP_TRY(OutputOf<NatWritten>(ctx, "nat"));
                 FP_CHECK_OK(written.nat_entries > 0 ? d.nat.SyncWith(CallFor(ctx), ctx.saga_id())
                                                     : d.nat.Sync(CallFor(ctx)));
                 return Json::object();
               }});
}

}  // namespace fp::app
