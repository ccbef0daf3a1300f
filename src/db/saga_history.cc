#include "db/saga_history.h"

#include <fmt/format.h>

#include "db/sagas.h"

namespace fp::db {

namespace {

constexpr std::string_view kListed = "id, name, state, time_created, time_modified, origin";

Result<SagaListed> ListedOf(const Row& r) {
  auto state = saga::ParseSagaState(r.Text(2));
  if (!state) return Fail(Error::Internal(fmt::format("corrupt saga state \"{}\"", r.Text(2))));
  return SagaListed{FP_TRY(UuidColumn(r, 0)), r.Text(1), *state, r.Int(3), r.Int(4), r.OptText(5)};
}

}  // namespace

Result<std::vector<SagaListed>> SagaListPage(Datastore& ds, const SagaFilter& filter,
                                             const std::optional<Uuid>& after, int64_t limit) {
  std::string sql = fmt::format("SELECT {} FROM saga WHERE 1 = 1", kListed);
  std::vector<SqlValue> params;
  if (filter.state) {
    // A literal (the enum's own text): for the rare states it is one of the terms of
    // saga_by_state's condition (ORs since schema 16), which is how SQLite's planner finds the
    // index usable.
    sql += fmt::format(" AND state = '{}'", saga::ToString(*filter.state));
  }
  if (filter.request_id) {
    // The origin as RequestSaga::Describe writes it (nlohmann's compact dump); a request id
    // is the server's UUID, but escape LIKE's wildcards all the same.
    std::string pattern;
    for (char c : *filter.request_id) {
      if (c == '%' || c == '_' || c == '\\') pattern += '\\';
      pattern += c;
    }
    sql += " AND origin LIKE ? ESCAPE '\\'";
    params.emplace_back("%\"request_id\":\"" + pattern + "\"%");
  }
  if (after) {
    sql += " AND id < ?";
    params.emplace_back(after->ToString());
  }
  sql += " ORDER BY id DESC LIMIT ?";
  params.emplace_back(limit);
  using Out = std::vector<SagaListed>;
  return ds.Read<Out>([&](Tx& tx) -> Result<Out> {
    Out out;
    for (const Row& r : FP_TRY(tx.QueryV(sql, params))) out.push_back(FP_TRY(ListedOf(r)));
    return out;
  });
}

Result<SagaExplained> SagaExplain(Datastore& ds, const Uuid& id) {
  return ds.Read<SagaExplained>([&](Tx& tx) -> Result<SagaExplained> {
    auto row = FP_TRY(
        tx.QueryRow(fmt::format("SELECT {}, dag, result FROM saga WHERE id = ?", kListed), id));
    if (!row) return Fail(Error::NotFoundById("saga", id.ToString()));
    SagaExplained out{FP_TRY(ListedOf(*row)), row->Text(6), row->OptText(7), {}};
    for (const Row& e : FP_TRY(tx.Query(
             "SELECT node_index, event_type, data, time_created FROM saga_node_event WHERE "
             "saga_id = ? ORDER BY node_index, time_created",
             id))) {
      auto type = saga::ParseSagaEventType(e.Text(1));
      if (!type) return Fail(Error::Internal("corrupt saga event type"));
      out.events.push_back(
          SagaEventAt{saga::SagaEvent{static_cast<int>(e.Int(0)), *type, e.OptText(2)}, e.Int(3)});
    }
    std::vector<saga::SagaEvent> events;
    events.reserve(out.events.size());
    for (const SagaEventAt& e : out.events) events.push_back(e.event);
    out.result = SagaResultOf(out.saga.state, std::move(out.result), events);
    return out;
  });
}

}  // namespace fp::db
