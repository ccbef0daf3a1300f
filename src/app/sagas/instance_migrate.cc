#include "app/sagas/instance_migrate.h"

#include "app/sagas/vm_steps.h"
#include "db/instances.h"
#include "loops/nat_reconciler.h"

namespace fp::app {

namespace {

using saga::Action;
using saga::ActionContext;
using saga::Json;
using Params = InstanceMigrateSagaParams;

}  // namespace

std::vector<saga::Node> InstanceMigrateNodes() {
  return {{"begin", "instance_migrate.begin"},
          {"destination", "instance_migrate.destination"},
          {"finish", "instance_migrate.finish"},
          {"switch", "instance_migrate.switch"},
          {"source", "instance_migrate.source"}};
}

saga::SagaDag InstanceMigrateSaga(const InstanceMigrateSagaParams& params) {
  return saga::SagaDag{
      .name = kInstanceMigrateSaga, .params = Json(params), .nodes = InstanceMigrateNodes()};
}

void RegisterInstanceMigrateActions(saga::ActionRegistry& r, SagaDeps& d) {
  r.Add(Action{.name = "instance_migrate.begin",
               .run_in_tx = [](db::Tx& tx, const ActionContext& ctx) -> Result<Json> {
                 auto p = FP_TRY(ParamsOf<Params>(ctx));
                 FP_TRY(
                     db::InstanceBeginMigrateIn(tx, p.instance_id, p.dst_sled_id, p.migration_id));
                 return Json::object();
               },
               .undo = [&d](const ActionContext& ctx) -> Status {
                 // Runs last when unwinding, after NAT was pointed back at the source sled: push
                 // it.
                 auto p = FP_TRY(ParamsOf<Params>(ctx));
                 FP_TRY(d.ds.Write<bool>([&](db::Tx& tx) -> Result<bool> {
                   FP_CHECK_OK(db::InstanceUndoMigrateIn(tx, p.instance_id, p.migration_id));
                   return true;
                 }));
                 SyncNatBestEffort(d, ctx);
                 return Ok();
               }});
  r.Add(Action{.name = "instance_migrate.destination",
               .run = [&d](const ActionContext& ctx) -> Result<Json> {
                 auto p = FP_TRY(ParamsOf<Params>(ctx));
                 return Json(FP_TRY(EnsureRunningOn(d, ctx, p.instance_id, p.dst_sled_id)));
               },
               .undo = [&d](const ActionContext& ctx) -> Status {
                 auto p = FP_TRY(ParamsOf<Params>(ctx));
                 UnregisterFrom(d, ctx, p.instance_id, p.dst_sled_id);
                 return Ok();
               }});
  r.Add(Action{
      .name = "instance_migrate.finish",
      .run_in_tx = [](db::Tx& tx, const ActionContext& ctx) -> Result<Json> {
        auto p = FP_TRY(ParamsOf<Params>(ctx));
        FP_CHECK_OK(db::InstanceFinishMigrateIn(tx, p.instance_id, p.dst_sled_id, p.migration_id));
        return Json::object();
      },
      .undo_in_tx = [](db::Tx& tx, const ActionContext& ctx) -> Status {
        auto p = FP_TRY(ParamsOf<Params>(ctx));
        return db::InstanceRevertMigrateIn(tx, p.instance_id, p.src_sled_id, p.migration_id);
      }});
  r.Add(Action{.name = "instance_migrate.switch",
               .run = [&d](const ActionContext& ctx) -> Result<Json> {
                 FP_CHECK_OK(d.nat.Sync(CallFor(ctx)));
                 return Json::object();
               },
               .undo = [&d](const ActionContext& ctx) -> Status {
                 SyncNatBestEffort(d, ctx);
                 return Ok();
               }});
  r.Add(Action{.name = "instance_migrate.source",
               .run = [&d](const ActionContext& ctx) -> Result<Json> {
                 auto p = FP_TRY(ParamsOf<Params>(ctx));
                 UnregisterFrom(d, ctx, p.instance_id, p.src_sled_id);
                 // Only now is the source VM no longer the instance's: until here the migration
                 // mark kept the reaper and the watcher away from both ends
                 // (InstanceFinishMigrateIn).
                 FP_TRY(d.ds.Write<bool>([&](db::Tx& tx) -> Result<bool> {
                   FP_CHECK_OK(db::InstanceEndMigrateIn(tx, p.instance_id, p.migration_id));
                   return true;
                 }));
                 return Json::object();
               }});
}

}  // namespace fp::app
