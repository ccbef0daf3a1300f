#include "app/saga_list.h"

#include "db/sagas.h"

namespace fp::app {

Status SagaList::MayList(const Actor& actor) const { return RequireFleetAdmin(actor); }

Result<std::vector<SagaSummary>> SagaList::List(const Actor& actor, int64_t limit) {
  FP_CHECK_OK(MayList(actor));
  std::vector<SagaSummary> out;
  for (const auto& [id, name, state] : FP_TRY(db::SagaListStates(ds_, limit))) {
    out.push_back(SagaSummary{id, name, std::string(db::ToString(state))});
  }
  return out;
}

}  // namespace fp::app
