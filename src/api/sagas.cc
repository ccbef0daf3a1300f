// Sagas (fleet admin; floatplane's extension for operators and tests): /v1/system/sagas, recent
// sagas and where they rest. A stuck saga shows here until someone repairs it.

#include "api/endpoint.h"
#include "api/pagination.h"

namespace fp::api {

void AddSagaRoutes(Routes& r) {
  r.Add("GET", "/v1/system/sagas", [](const Ctx& c) -> Result<Reply> {
    FP_CHECK_OK(c.app.sagas.MayList(c.actor));
    int64_t limit = FP_TRY(ParseLimit(c.query));
    Json items = Json::array();
    for (const auto& s : FP_TRY(c.app.sagas.List(c.actor, limit))) {
      items.push_back(Json{{"id", s.id.ToString()}, {"name", s.name}, {"state", s.state}});
    }
    return Reply{200, Json{{"items", items}, {"next_page", nullptr}}};
  });
}

}  // namespace fp::api
