#include "app/sleds.h"

#include "db/instances.h"
#include "db/sleds.h"

namespace fp::app {

Result<std::vector<model::Sled>> Sleds::List(const Actor& actor) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  return db::SledList(ds_);
}

Result<model::Sled> Sleds::View(const Actor& actor, const Uuid& sled_id) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  return db::SledGet(ds_, sled_id);
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

}  // namespace fp::app
