#include "app/sagas/instance_delete.h"

#include "db/instances.h"

namespace fp::app {

std::vector<saga::Node> InstanceDeleteNodes() { return {{"record", "instance_delete.record"}}; }

saga::SagaDag InstanceDeleteSaga(const InstanceDeleteSagaParams& params) {
  return saga::SagaDag{
      .name = kInstanceDeleteSaga, .params = saga::Json(params), .nodes = InstanceDeleteNodes()};
}

void RegisterInstanceDeleteActions(saga::ActionRegistry& r) {
  r.Add(saga::Action{
      .name = "instance_delete.record",
      .run_in_tx = [](db::Tx& tx, const saga::ActionContext& ctx) -> Result<saga::Json> {
        auto p = FP_TRY(ParamsOf<InstanceDeleteSagaParams>(ctx));
        FP_CHECK_OK(db::InstanceDeleteIn(tx, p.instance_id));
        return saga::Json::object();
      }});
}

}  // namespace fp::app
