#include "db/audit_log.h"

#include <fmt/format.h>

#include "db/counters.h"
#include "saga/dag.h"

namespace fp::db {

namespace {

constexpr std::string_view kColumns =
    "id, time_started, time_completed, request_id, request_uri, operation_id, source_ip, "
    "user_agent, actor_silo_id, actor_user_id, auth_method, credential_id, result_kind, "
    "http_status, error_code, error_message, saga_id, success_status, server_id, saga_completes";

std::vector<SqlValue> Values(const model::AuditEntry& e) {
  bool completed = e.time_completed != 0;
  return {Tx::ToSql(e.id),
          e.time_started,
          completed ? SqlValue(e.time_completed) : SqlValue(nullptr),
          e.request_id,
          e.request_uri,
          e.operation_id,
          e.source_ip,
          Tx::ToSql(e.user_agent),
          Tx::ToSql(e.actor_silo_id),
          Tx::ToSql(e.actor_user_id),
          Tx::ToSql(e.auth_method),
          Tx::ToSql(e.credential_id),
          completed ? SqlValue(std::string(ToString(e.result))) : SqlValue(nullptr),
          completed ? SqlValue(int64_t{e.http_status}) : SqlValue(nullptr),
          Tx::ToSql(e.error_code),
          completed ? SqlValue(e.error_message) : SqlValue(nullptr),
          Tx::ToSql(e.saga_id),
          int64_t{e.success_status},
          Tx::ToSql(e.server_id),
          Tx::ToSql(e.saga_completes)};
}

std::string InsertSql() {
  return fmt::format(
      "INSERT INTO audit_log ({}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
      "?, ?, ?, ?, ?, ?)",
      kColumns);
}

Result<model::AuditEntry> EntryOf(const Row& row) {
  model::AuditEntry e;
  e.id = FP_TRY(UuidColumn(row, 0));
  e.time_started = row.Int(1);
  e.time_completed = row.IsNull(2) ? 0 : row.Int(2);
  e.request_id = row.Text(3);
  e.request_uri = row.Text(4);
  e.operation_id = row.Text(5);
  e.source_ip = row.Text(6);
  e.user_agent = row.OptText(7);
  e.actor_silo_id = FP_TRY(OptUuidColumn(row, 8));
  e.actor_user_id = FP_TRY(OptUuidColumn(row, 9));
  e.auth_method = row.OptText(10);
  e.credential_id = FP_TRY(OptUuidColumn(row, 11));
  if (!row.IsNull(12)) {
    auto kind = model::ParseAuditResultKind(row.Text(12));
    if (!kind) {
      return Fail(Error::Internal(fmt::format("corrupt audit_log.result_kind \"{}\" in entry {}",
                                              row.Text(12), e.id.ToString())));
    }
    e.result = *kind;
  }
  e.http_status = row.IsNull(13) ? 0 : static_cast<int>(row.Int(13));
  e.error_code = row.OptText(14);
  e.error_message = row.OptText(15).value_or("");
  e.saga_id = FP_TRY(OptUuidColumn(row, 16));
  e.success_status = static_cast<int>(row.Int(17));
  e.server_id = row.OptText(18);
  e.saga_completes = row.Int(19) != 0;
  return e;
}

}  // namespace

Status AuditInsertIn(Tx& tx, const model::AuditEntry& entry) {
  return tx.ExecLaterV(InsertSql(), Values(entry));
}

Status AuditFinishIn(Tx& tx, const model::AuditEntry& entry) {
  // Held back (on PostgreSQL it goes with the COMMIT): nothing reads what it wrote before then.
  return tx.ExecLaterV(
      InsertSql() +
          " ON CONFLICT (id) DO UPDATE SET time_completed = excluded.time_completed, "
          "result_kind = excluded.result_kind, http_status = excluded.http_status, "
          "error_code = excluded.error_code, error_message = excluded.error_message "
          "WHERE audit_log.time_completed IS NULL AND audit_log.saga_completes = 0",
      Values(entry));
}

Status AuditLinkSagaIn(Tx& tx, const Uuid& entry_id, const Uuid& saga_id, bool completes) {
  return tx.ExecLater(
      "UPDATE audit_log SET saga_id = ?, saga_completes = ? WHERE id = ? AND time_completed IS "
      "NULL",
      saga_id, completes, entry_id);
}

namespace {

// Completes the entry that `saga_id` completes (`set`: the assignments, their values first in
// `params`, then the saga's id).
Status CompleteForSaga(Tx& tx, std::string_view set, std::vector<SqlValue> params,
                       const Uuid& saga_id) {
  if (tx.postgres()) {
    params.emplace_back(saga_id.ToString());
    return tx.ExecLaterV(fmt::format("UPDATE audit_log SET {} WHERE saga_id = ? AND "
                                     "saga_completes = 1 AND time_completed IS NULL",
                                     set),
                         params);
  }
  // SQLite would copy the rows it finds through audit_log_in_progress, whose condition the
  // update changes, into a temporary b-tree first; found first and updated by rowid, it does not.
  auto rows =
      FP_TRY(tx.Query("SELECT rowid FROM audit_log WHERE saga_id = ? AND saga_completes = 1 AND "
                      "time_completed IS NULL",
                      saga_id));
  const std::string sql = fmt::format("UPDATE audit_log SET {} WHERE rowid = ?", set);
  for (const Row& row : rows) {
    std::vector<SqlValue> values = params;
    values.emplace_back(row.Int(0));
    FP_TRY(tx.ExecV(sql, values));
  }
  return Ok();
}

}  // namespace

Status AuditCompleteForSagaIn(Tx& tx, const Uuid& saga_id, saga::SagaState state,
                              const std::optional<std::string>& result) {
  if (state == saga::SagaState::kDone) {
    return CompleteForSaga(tx,
                           "time_completed = ?, result_kind = 'success', http_status = "
                           "success_status",
                           {tx.now()}, saga_id);
  }
  Error error = saga::ErrorFromJson(saga::Json::parse(result.value_or("null"), nullptr, false));
  std::string message =
      error.kind() == ErrorKind::kInternal ? "Internal Server Error" : error.message();
  if (state == saga::SagaState::kStuck) {
    message =
        fmt::format("the operation stopped part-way and needs an operator (saga {} is stuck): {}",
                    saga_id.ToString(), message);
  }
  return CompleteForSaga(
      tx,
      "time_completed = ?, result_kind = 'error', http_status = ?, error_code = ?, "
      "error_message = ?",
      {tx.now(), int64_t{state == saga::SagaState::kStuck ? 500 : error.HttpStatus()},
       std::string(error.ErrorCode()), std::move(message)},
      saga_id);
}

Result<std::vector<model::AuditEntry>> AuditList(Datastore& ds,
                                                 const model::AuditPageRequest& page) {
  std::vector<SqlValue> params{page.start};
  std::string sql = fmt::format(
      "SELECT {} FROM audit_log WHERE time_completed IS NOT NULL AND time_completed >= ?",
      kColumns);
  if (page.end) {
    sql += " AND time_completed < ?";
    params.emplace_back(*page.end);
  }
  const char* cmp = page.descending ? "<" : ">";
  if (page.after) {
    sql += fmt::format(" AND (time_completed {0} ? OR (time_completed = ? AND id {0} ?))", cmp);
    params.emplace_back(page.after->first);
    params.emplace_back(page.after->first);
    params.emplace_back(page.after->second.ToString());
  }
  const char* order = page.descending ? "DESC" : "ASC";
  sql += fmt::format(" ORDER BY time_completed {0}, id {0} LIMIT ?", order);
  params.emplace_back(page.limit);
  using Out = std::vector<model::AuditEntry>;
  return ds.Read<Out>([&](Tx& tx) -> Result<Out> {
    Out out;
    for (const Row& row : FP_TRY(tx.QueryV(sql, params))) out.push_back(FP_TRY(EntryOf(row)));
    return out;
  });
}

Result<int64_t> AuditCompleteCutShort(Datastore& ds, Timestamp started_before, int64_t limit,
                                      const std::optional<std::string>& server_id) {
  // With a server: only its entries (its earlier run's, at its start), whatever their age.
  const std::string kCutShort = fmt::format(
      "FROM audit_log a WHERE a.time_completed IS NULL AND a.time_started < ? AND {} NOT "
      "EXISTS (SELECT 1 FROM saga s WHERE s.id = a.saga_id AND s.state IN ('running', "
      "'unwinding'))",
      server_id ? "a.server_id = ? AND" : "");
  std::vector<SqlValue> bound{started_before};
  if (server_id) bound.emplace_back(*server_id);
  // None, the usual case, costs one read and no durable commit.
  bool any = FP_TRY(ds.ReadLatest<bool>([&](Tx& tx) -> Result<bool> {
    auto rows = FP_TRY(tx.QueryV(fmt::format("SELECT 1 {} LIMIT 1", kCutShort), bound));
    return !rows.empty();
  }));
  if (!any) return int64_t{0};
  std::vector<SqlValue> params{SqlValue(int64_t{0})};
  params.insert(params.end(), bound.begin(), bound.end());
  params.emplace_back(limit);
  return ds.Write<int64_t>([&](Tx& tx) -> Result<int64_t> {
    params[0] = tx.now();
    return tx.ExecV(
        fmt::format("UPDATE audit_log SET time_completed = ?, result_kind = 'error', http_status "
                    "= 503, error_code = 'ServiceUnavailable', error_message = 'the server "
                    "stopped before this request completed, and its outcome was not recorded; "
                    "what it did may be incomplete: retry it (with the same Idempotency-Key, to "
                    "learn its outcome)' WHERE id IN (SELECT a.id {} LIMIT ?)",
                    kCutShort),
        params);
  });
}

Result<int64_t> AuditPrune(Datastore& ds, int64_t retention_us, int64_t limit) {
  bool any = FP_TRY(ds.ReadLatest<bool>([&](Tx& tx) -> Result<bool> {
    auto row =
        FP_TRY(tx.QueryRow("SELECT 1 FROM audit_log WHERE time_completed IS NOT NULL AND "
                           "time_completed < ? ORDER BY time_completed LIMIT 1",
                           tx.now() - retention_us));
    return row.has_value();
  }));
  if (!any) return int64_t{0};
  return ds.Write<int64_t>([&](Tx& tx) -> Result<int64_t> {
    int64_t pruned = FP_TRY(
        tx.Exec("DELETE FROM audit_log WHERE id IN (SELECT id FROM audit_log WHERE "
                "time_completed IS NOT NULL AND time_completed < ? ORDER BY time_completed, id "
                "LIMIT ?)",
                tx.now() - retention_us, limit));
    FP_CHECK_OK(CounterAddIn(tx, "audit_entries_pruned", pruned));
    return pruned;
  });
}

}  // namespace fp::db
