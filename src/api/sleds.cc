// Sleds (fleet admin): /v1/system/hardware/sleds, and their expunge (an extension).

#include "api/endpoint.h"
#include "api/views.h"

namespace fp::api {

void AddSledRoutes(Routes& r) {
  r.Add("GET", "/v1/system/hardware/sleds", [](const Ctx& c) -> Result<Reply> {
    auto sleds = FP_TRY(FP_TRY(c.Hardware())->List(c.actor));
    Json items = Json::array();
    for (const auto& s : sleds) items.push_back(SledView(s));
    return Reply{200, Json{{"items", items}, {"next_page", nullptr}}};
  });
  r.Add("GET", "/v1/system/hardware/sleds/{sled_id}", [](const Ctx& c) -> Result<Reply> {
    return Reply{
        200, SledView(FP_TRY(FP_TRY(c.Hardware())->View(c.actor, FP_TRY(c.PathUuid("sled_id")))))};
  });
  r.Add("GET", "/v1/system/hardware/sleds/{sled_id}/instances", [](const Ctx& c) -> Result<Reply> {
    auto list = FP_TRY(FP_TRY(c.Hardware())->InstancesOn(c.actor, FP_TRY(c.PathUuid("sled_id"))));
    Json items = Json::array();
    for (const auto& s : list) {
      items.push_back(SledInstanceView(s.instance, s.project_name, s.silo_name));
    }
    return Reply{200, Json{{"items", items}, {"next_page", nullptr}}};
  });
  r.Add("POST", "/v1/system/hardware/sleds/{sled_id}/expunge", [](const Ctx& c) -> Result<Reply> {
    auto sled_id = FP_TRY(c.PathUuid("sled_id"));
    return Reply{
        200, SledView(FP_TRY(
                 FP_TRY(c.Hardware())->Expunge(c.Effect<model::Sled>(200, &SledView), sled_id)))};
  });
}

}  // namespace fp::api
