#include "db/sagas.h"

#include <fmt/format.h>

#include <algorithm>

#include "db/audit_log.h"
#include "db/counters.h"

namespace fp::db {

Status DatastoreSagaStore::Write(const std::function<Status(saga::StoreTx&)>& body) {
  return ds_.Write([&](Tx& tx) { return body(tx); });
}

namespace {
// The engine hands back the transaction Write gave its body: a db::Tx.
Tx& TxOf(saga::StoreTx& tx) { return static_cast<Tx&>(tx); }

// The record's transaction writes the saga's row, which checks the owner: the insert that
// created it (earlier in the transaction), or the update to its new state.
bool OwnerCheckedIn(const Tx& tx, const Uuid& saga_id, const saga::SagaRecord& record) {
  return record.new_state.has_value() || tx.SagaCreatedHere(saga_id);
}

// A done saga's result is its last node's output, which the same record logs as that node's
// "succeeded" event: the row then keeps NULL instead of a second copy (about 480 bytes of an
// attach's or a detach's row, which the update to done would otherwise grow by that much), and
// readers take the output from the event (SagaResultOf). `last` is the record's "succeeded"
// event of the highest node, if any.
bool ResultIsLastOutput(std::optional<SagaState> new_state,
                        const std::optional<std::string>& result, const SagaEvent* last) {
  return new_state == SagaState::kDone && result && last != nullptr &&
         last->type == saga::SagaEventType::kSucceeded && last->data == result;
}

const SagaEvent* LastSucceeded(const std::vector<SagaEvent>& events) {
  const SagaEvent* last = nullptr;
  for (const SagaEvent& e : events) {
    if (e.type == saga::SagaEventType::kSucceeded && (!last || e.node_index > last->node_index)) {
      last = &e;
    }
  }
  return last;
}

Status RecordStateIn(Tx& tx, const Uuid& saga_id, const SagaOwner& owner, SagaState new_state,
                     const std::optional<std::string>& result, bool result_is_last_output) {
  FP_CHECK_OK(
      tx.ExecLaterOne(saga::LostSagaError(saga_id, owner),
                      "UPDATE saga SET state = ?, result = ?, time_modified = ? WHERE id = ? AND "
                      "current_sec = ? AND adopt_generation = ?",
                      ToString(new_state), result_is_last_output ? std::nullopt : result, tx.now(),
                      saga_id, owner.sec, owner.generation));
  if (new_state == SagaState::kDone || new_state == SagaState::kUnwound ||
      new_state == SagaState::kStuck) {
    // The request the saga carries ends with it: its audit entry completes in this commit.
    FP_CHECK_OK(AuditCompleteForSagaIn(tx, saga_id, new_state, result));
  }
  return Ok();
}
}  // namespace

std::optional<std::string> SagaResultOf(SagaState state, std::optional<std::string> stored,
                                        const std::vector<SagaEvent>& events) {
  if (stored || state != SagaState::kDone) return stored;
  const SagaEvent* last = LastSucceeded(events);
  if (last == nullptr) return std::nullopt;
  return last->data;
}

Result<bool> DatastoreSagaStore::CreateIn(saga::StoreTx& tx, const SagaRow& row,
                                          const saga::SagaOrigin* origin) {
  return SagaCreateIn(TxOf(tx), row, origin);
}

Status DatastoreSagaStore::RecordIn(saga::StoreTx& tx, const Uuid& saga_id, const SagaOwner& owner,
                                    const std::optional<SagaEvent>& event,
                                    std::optional<SagaState> new_state,
                                    const std::optional<std::string>& result) {
  return SagaRecordIn(TxOf(tx), saga_id, owner, event, new_state, result);
}

Status DatastoreSagaStore::RecordAllIn(saga::StoreTx& tx, const Uuid& saga_id,
                                       const SagaOwner& owner, const saga::SagaRecord& record) {
  // Each event's own look at the saga's owner is needed only where nothing else in the
  // transaction checks it: else the events go in one statement, without that look.
  if (record.events.empty() || !OwnerCheckedIn(TxOf(tx), saga_id, record)) {
    return SagaStore::RecordAllIn(tx, saga_id, owner, record);
  }
  return SagaRecordAllIn(TxOf(tx), saga_id, owner, record);
}

Result<SagaLog> DatastoreSagaStore::Load(const Uuid& id) { return SagaLoad(ds_, id); }

Result<std::vector<saga::OwnedSaga>> DatastoreSagaStore::ListUnfinished(const std::string& sec) {
  return SagaListUnfinished(ds_, sec);
}

Result<std::optional<int64_t>> DatastoreSagaStore::Claim(const Uuid& id, const SagaOwner& owner) {
  return SagaClaim(ds_, id, owner);
}

Result<bool> DatastoreSagaStore::MarkStuck(const Uuid& id, const SagaOwner& owner,
                                           const std::string& result) {
  return SagaMarkStuck(ds_, id, owner, result);
}

Result<bool> SagaCreateIn(Tx& tx, const SagaRow& row, const saga::SagaOrigin* origin) {
  // Held back (on PostgreSQL it goes with the first statement that needs an answer): an id
  // taken already fails the transaction with SagaExistsError instead of answering false.
  FP_CHECK_OK(tx.ExecLaterOne(
      saga::SagaExistsError(row.id),
      "INSERT INTO saga (id, name, dag, state, current_sec, adopt_generation, engine_version, "
      "result, time_created, time_modified, origin) VALUES (?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?) "
      "ON CONFLICT (id) DO NOTHING",
      row.id, row.name, row.dag, ToString(row.state), row.owner.sec, row.owner.generation,
      row.engine_version, tx.now(), tx.now(), row.origin));
  tx.NoteSagaCreated(row.id);
  // A request's saga: its key's record and its audit entry commit with the saga's first commit.
  if (origin != nullptr) FP_CHECK_OK(origin->RecordIn(tx, row.id));
  return true;
}

Status SagaRecordIn(Tx& tx, const Uuid& saga_id, const SagaOwner& owner,
                    const std::optional<SagaEvent>& event, std::optional<SagaState> new_state,
                    const std::optional<std::string>& result) {
  // Every write is conditional on the owner, checked by the write itself (one statement each,
  // not a check and then a write), and held back: on PostgreSQL it goes with the transaction's
  // next statement or its COMMIT, and the server fails the transaction when it changed no row.
  // An event recorded already (a node run again) is kept as it was, and still counts as
  // changed, so that a write that changes nothing means only "not the owner".
  if (event) {
    FP_CHECK_OK(tx.ExecLaterOne(
        saga::LostSagaError(saga_id, owner),
        "INSERT INTO saga_node_event (saga_id, node_index, event_type, data, time_created) "
        "SELECT ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM saga WHERE id = ? AND current_sec = ? "
        "AND adopt_generation = ?) ON CONFLICT (saga_id, node_index, event_type) DO UPDATE SET "
        "data = saga_node_event.data",
        saga_id, event->node_index, ToString(event->type), event->data, tx.now(), saga_id,
        owner.sec, owner.generation));
  }
  if (new_state) {
    FP_CHECK_OK(RecordStateIn(tx, saga_id, owner, *new_state, result,
                              ResultIsLastOutput(new_state, result, event ? &*event : nullptr)));
  }
  if (!event && !new_state) {
    auto owned = FP_TRY(
        tx.QueryRow("SELECT 1 FROM saga WHERE id = ? AND current_sec = ? AND adopt_generation = ?",
                    saga_id, owner.sec, owner.generation));
    if (!owned) return Fail(saga::LostSagaError(saga_id, owner));
  }
  return Ok();
}

Status SagaRecordAllIn(Tx& tx, const Uuid& saga_id, const SagaOwner& owner,
                       const saga::SagaRecord& record) {
  if (!OwnerCheckedIn(tx, saga_id, record) || record.events.empty()) {
    return Fail(
        Error::Internal("SagaRecordAllIn: a record with events whose owner nothing checks"));
  }
  if (record.new_state) {
    // First, so that a lost owner fails the transaction with LostSagaError before the events.
    FP_CHECK_OK(RecordStateIn(
        tx, saga_id, owner, *record.new_state, record.result,
        ResultIsLastOutput(record.new_state, record.result, LastSucceeded(record.events))));
  }
  std::string sql =
      "INSERT INTO saga_node_event (saga_id, node_index, event_type, data, time_created) VALUES ";
  std::vector<SqlValue> params;
  params.reserve(record.events.size() * 5);
  for (size_t i = 0; i < record.events.size(); ++i) {
    const SagaEvent& e = record.events[i];
    // An event twice in one record is written once, the first (as two records would): one
    // INSERT may not change a row twice on PostgreSQL.
    auto same = [&e](const SagaEvent& o) {
      return o.node_index == e.node_index && o.type == e.type;
    };
    if (std::any_of(record.events.begin(), record.events.begin() + static_cast<std::ptrdiff_t>(i),
                    same)) {
      continue;
    }
    sql += params.empty() ? "(?, ?, ?, ?, ?)" : ", (?, ?, ?, ?, ?)";
    params.push_back(Tx::ToSql(saga_id));
    params.push_back(int64_t{e.node_index});
    params.push_back(Tx::ToSql(ToString(e.type)));
    params.push_back(Tx::ToSql(e.data));
    params.push_back(Tx::ToSql(tx.now()));
  }
  // As SagaRecordIn's: an event recorded already (a node run again) is kept as it was.
  sql += " ON CONFLICT (saga_id, node_index, event_type) DO UPDATE SET data = saga_node_event.data";
  return tx.ExecLaterV(sql, params);
}

Result<SagaLog> SagaLoad(Datastore& ds, const Uuid& id) {
  return ds.Read<SagaLog>([&](Tx& tx) -> Result<SagaLog> {
    auto row = FP_TRY(tx.QueryRow(
        "SELECT name, dag, state, current_sec, adopt_generation, engine_version, result, "
        "time_created, origin FROM saga WHERE id = ?",
        id));
    if (!row) return Fail(Error::NotFoundById("saga", id.ToString()));
    SagaLog log;
    log.saga.id = id;
    log.saga.name = row->Text(0);
    log.saga.dag = row->Text(1);
    auto state = ParseSagaState(row->Text(2));
    if (!state) return Fail(Error::Internal("corrupt saga state"));
    log.saga.state = *state;
    log.saga.owner = SagaOwner{row->Text(3), row->Int(4)};
    log.saga.engine_version = row->Int(5);
    log.saga.time_created = row->Int(7);
    log.saga.origin = row->OptText(8);
    for (const Row& e : FP_TRY(
             tx.Query("SELECT node_index, event_type, data FROM saga_node_event WHERE saga_id = ? "
                      "ORDER BY node_index",
                      id))) {
      auto type = ParseSagaEventType(e.Text(1));
      if (!type) return Fail(Error::Internal("corrupt saga event type"));
      log.events.push_back(SagaEvent{static_cast<int>(e.Int(0)), *type, e.OptText(2)});
    }
    log.saga.result = SagaResultOf(log.saga.state, row->OptText(6), log.events);
    return log;
  });
}

Result<std::vector<saga::OwnedSaga>> SagaListUnfinished(Datastore& ds, const std::string& sec) {
  using Out = std::vector<saga::OwnedSaga>;
  return ds.Read<Out>([&](Tx& tx) -> Result<Out> {
    Out out;
    for (const Row& r :
         FP_TRY(tx.Query("SELECT id, adopt_generation FROM saga WHERE current_sec = ? AND "
                         "state IN ('running', 'unwinding') ORDER BY time_created, id",
                         sec))) {
      out.push_back(saga::OwnedSaga{FP_TRY(UuidColumn(r, 0)), r.Int(1)});
    }
    return out;
  });
}

Result<std::optional<int64_t>> SagaClaim(Datastore& ds, const Uuid& id, const SagaOwner& owner) {
  using Out = std::optional<int64_t>;
  return ds.Write<Out>([&](Tx& tx) -> Result<Out> {
    int64_t n = FP_TRY(
        tx.Exec("UPDATE saga SET adopt_generation = adopt_generation + 1 WHERE id = ? AND "
                "current_sec = ? AND adopt_generation = ? AND state IN ('running', 'unwinding')",
                id, owner.sec, owner.generation));
    if (n != 1) return Out();
    return Out(owner.generation + 1);
  });
}

Result<std::vector<SagaSummary>> SagaListStates(Datastore& ds, int64_t limit) {
  using Out = std::vector<SagaSummary>;
  return ds.Read<Out>([&](Tx& tx) -> Result<Out> {
    Out out;
    for (const Row& r : FP_TRY(tx.Query(
             "SELECT id, name, state FROM saga ORDER BY time_created DESC LIMIT ?", limit))) {
      auto state = ParseSagaState(r.Text(2));
      if (!state) return Fail(Error::Internal("corrupt saga state"));
      out.push_back(SagaSummary{FP_TRY(UuidColumn(r, 0)), r.Text(1), *state});
    }
    return out;
  });
}

Result<std::optional<saga::SagaState>> SagaStateOf(Datastore& ds, const Uuid& id) {
  using Out = std::optional<saga::SagaState>;
  return ds.Read<Out>([&](Tx& tx) -> Result<Out> {
    auto row = FP_TRY(tx.QueryRow("SELECT state FROM saga WHERE id = ?", id));
    if (!row) return Out();
    auto state = ParseSagaState(row->Text(0));
    if (!state) return Fail(Error::Internal("corrupt saga state"));
    return Out(*state);
  });
}

Result<bool> SagaMarkStuck(Datastore& ds, const Uuid& id, const SagaOwner& owner,
                           const std::string& result) {
  return ds.Write<bool>([&](Tx& tx) -> Result<bool> {
    int64_t n = FP_TRY(
        tx.Exec("UPDATE saga SET state = 'stuck', result = ?, time_modified = ? WHERE id = ? AND "
                "current_sec = ? AND adopt_generation = ? AND state IN ('running', 'unwinding')",
                result, tx.now(), id, owner.sec, owner.generation));
    if (n == 1) FP_CHECK_OK(AuditCompleteForSagaIn(tx, id, SagaState::kStuck, result));
    return n == 1;
  });
}

Result<int64_t> SagaPruneFinished(Datastore& ds, int64_t retention_us, int64_t limit) {
  // Nothing to prune, the usual case, costs one read and no durable commit.
  bool any = FP_TRY(ds.ReadLatest<bool>([&](Tx& tx) -> Result<bool> {
    auto row = FP_TRY(
        tx.QueryRow("SELECT 1 FROM saga WHERE state IN ('done', 'unwound') AND time_modified < ? "
                    "ORDER BY time_modified LIMIT 1",
                    tx.now() - retention_us));
    return row.has_value();
  }));
  if (!any) return int64_t{0};
  return ds.Write<int64_t>([&](Tx& tx) -> Result<int64_t> {
    // The state condition is the index's own (saga_finished), so the oldest come from it.
    auto oldest = FP_TRY(
        tx.Query("SELECT id FROM saga WHERE state IN ('done', 'unwound') AND time_modified < ? "
                 "ORDER BY time_modified LIMIT ?",
                 tx.now() - retention_us, limit));
    for (const Row& r : oldest) {
      // Events first: they reference the saga.
      FP_TRY(tx.Exec("DELETE FROM saga_node_event WHERE saga_id = ?", r.Text(0)));
      FP_TRY(tx.Exec("DELETE FROM saga WHERE id = ?", r.Text(0)));
    }
    const auto pruned = static_cast<int64_t>(oldest.size());
    FP_CHECK_OK(CounterAddIn(tx, "sagas_pruned", pruned));
    return pruned;
  });
}

Result<SagaHistoryStats> SagaHistory(Datastore& ds, int64_t exact_up_to) {
  return ds.ReadLatest<SagaHistoryStats>([&](Tx& tx) -> Result<SagaHistoryStats> {
    int64_t rows = 0;
    if (tx.postgres()) {
      // No counter row there (schema 8): one row every saga insert updated serialized them.
      // count(*) reads every row: at three days of history, tens of millions, at every scrape.
      // Past the bound, the rows per page that ANALYZE (autovacuum's) found times the pages the
      // table has now. CASE evaluates the count only in its branch.
      rows = FP_TRY(tx.QueryRow("SELECT CASE WHEN c.reltuples::float8 > ? AND c.relpages > 0 THEN "
                                "(c.reltuples::float8 / c.relpages * (pg_relation_size(c.oid) / "
                                "current_setting('block_size')::float8))::bigint "
                                "ELSE (SELECT count(*) FROM saga) END "
                                "FROM pg_class c WHERE c.oid = 'saga'::regclass",
                                exact_up_to))
                 ->Int(0);
    } else {
      rows = FP_TRY(CounterValueIn(tx, "saga_rows"));
    }
    return SagaHistoryStats{rows, FP_TRY(CounterValueIn(tx, "sagas_pruned"))};
  });
}

}  // namespace fp::db
