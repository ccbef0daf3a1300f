#include "app/sleds.h"

#include "common/log.h"
#include "db/instances.h"
#include "db/request_effect.h"
#include "db/sleds.h"
#include "loops/nat_reconciler.h"
#include "loops/sled_watcher.h"

namespace fp::app {

model::Sled Sleds::WithReport(model::Sled sled) const {
  for (const loops::SledWatchStatus& s : watcher_.SledStatuses()) {
    if (s.sled_id == sled.id && s.last_report > 0) sled.last_report = s.last_report;
  }
  return sled;
}

Result<std::vector<model::Sled>> Sleds::List(const Actor& actor) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  std::vector<model::Sled> sleds = FP_TRY(db::SledList(ds_));
  for (model::Sled& s : sleds) s = WithReport(std::move(s));
  return sleds;
}

Result<model::Sled> Sleds::View(const Actor& actor, const Uuid& sled_id) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  return WithReport(FP_TRY(db::SledGet(ds_, sled_id)));
}

Result<std::vector<Sleds::SledInstance>> Sleds::InstancesOn(const Actor& actor,
                                                            const Uuid& sled_id) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  FP_TRY(db::SledGet(ds_, sled_id));
  std::vector<SledInstance> out;
  for (const model::Instance& i : FP_TRY(db::InstancesOnSled(ds_, sled_id))) {
    auto names = FP_TRY(db::InstanceNames(ds_, i.id));
    out.push_back(SledInstance{i, names.first, names.second});
  }
  return out;
}

Result<model::Sled> Sleds::Expunge(const Request<model::Sled>& rq, const Uuid& sled_id) {
  FP_CHECK_OK(RequireFleetAdmin(rq.actor));
  model::Sled sled = FP_TRY(db::SledExpunge(ds_, sled_id, db::EffectOf<model::Sled>(rq)));
  // Its instances' NAT rows went in the same commit: tell the switches now (the heartbeat
  // would within its period), and take the VMs it still runs off it if it answers.
  if (auto s = nat_.Sync(); !s) {
    LogEvent("warn", "NAT sync after a sled expunge failed", {{"error", s.error().message()}});
  }
  watcher_.Wake();
  return WithReport(std::move(sled));
}

}  // namespace fp::app
