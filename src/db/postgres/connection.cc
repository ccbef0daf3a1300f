#include "db/postgres/connection.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <memory>
#include <optional>
#include <utility>

#include "db/postgres/wire_values.h"

namespace fp::db::postgres {

namespace {

std::string Trimmed(const char* message) {
  std::string m = message ? message : "";
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  return m;
}

}  // namespace

std::string PgConnection::Shorten(std::string_view sql) {
  return std::string(sql.substr(0, 120)) + (sql.size() > 120 ? "..." : "");
}

Result<std::unique_ptr<PgConnection>> PgConnection::Open(const std::string& url) {
  FP_CHECK_OK(LoadLibpq());
  // Defaults first: the URL's own settings, expanded from dbname, override them. Keepalives and
  // tcp_user_timeout (ms) so that a network that silently drops the connection is noticed in
  // seconds (then the engine reconnects and retries) rather than after the kernel's minutes.
  const char* keywords[] = {
      "connect_timeout",  "keepalives",       "keepalives_idle", "keepalives_interval",
      "keepalives_count", "tcp_user_timeout", "dbname",          nullptr};
  const char* values[] = {"5", "1", "5", "2", "3", "10000", url.c_str(), nullptr};
  PgConnPtr conn(PQconnectdbParams(keywords, values, /*expand_dbname=*/1));
  if (!conn) return Fail(Error::Unavailable("cannot connect to PostgreSQL: out of memory"));
  if (PQstatus(conn.get()) != CONNECTION_OK) {
    return Fail(Error::Unavailable(
        fmt::format("cannot connect to PostgreSQL: {}", Trimmed(PQerrorMessage(conn.get())))));
  }
  // Notices (e.g. "already exists, skipping") are not errors and have no reader here.
  PQsetNoticeProcessor(
      conn.get(), [](void*, const char*) {}, nullptr);
  std::unique_ptr<PgConnection> out(new PgConnection(std::move(conn)));
  // bytea results are decoded from the hex format only: pinned for the session here (a database
  // or role may default to 'escape'), in the same round trip.
  auto me = out->Query(
      "SELECT pid, backend_start::text, set_config('bytea_output', 'hex', false) FROM "
      "pg_stat_activity WHERE pid = pg_backend_pid()",
      {});
  if (!me) return Fail(Error::Unavailable(me.error().message()));
  if (!me->empty()) {
    out->backend_pid_ = static_cast<int>(me->front().Int(0));
    out->backend_start_ = me->front().Text(1);
  }
  return out;
}

std::function<void()> PgConnection::Canceller() {
  std::shared_ptr<PGcancel> cancel(PQgetCancel(conn_.get()), &PQfreeCancel);
  return [cancel] {
    if (cancel == nullptr) return;
    char why[256];
    (void)PQcancel(cancel.get(), why, sizeof why);  // best effort: the caller asks again
  };
}

std::string PgConnection::Option(std::string_view keyword) const {
  std::unique_ptr<PQconninfoOption, decltype(&PQconninfoFree)> options(PQconninfo(conn_.get()),
                                                                       &PQconninfoFree);
  for (PQconninfoOption* o = options.get(); o != nullptr && o->keyword != nullptr; ++o) {
    if (keyword == o->keyword) return o->val != nullptr ? o->val : "";
  }
  return "";
}

Error PgConnection::Failure(std::string_view sql, const PGresult* r) {
  std::string state = SqlState(r);
  if (state == kQueryCanceled) cancelled_ever_ = true;
  // A timeout is retried too: the engine then finds its deadline passed and answers 503.
  if (state == kSerializationFailure || state == kDeadlockDetected || state == kQueryCanceled ||
      state == kLockNotAvailable) {
    retryable_ = true;
  }
  std::string message =
      Trimmed(r != nullptr ? PQresultErrorMessage(r) : PQerrorMessage(conn_.get()));
  if (message.empty()) message = Trimmed(PQerrorMessage(conn_.get()));
  return Error::Internal(fmt::format("postgres: {}: {}{}", Shorten(sql), message,
                                     state.empty() ? "" : fmt::format(" (SQLSTATE {})", state)));
}

void PgConnection::DeferBegin(std::vector<std::string> statements, size_t snapshot_at, bool write) {
  DropPending();
  snapshot_at_ = std::min(snapshot_at, statements.size());
  queued_ = false;
  queue_sent_ = false;
  ended_ = false;
  read_only_ = !write;
  held_back_failure_.reset();
  timeouts_.clear();
  for (const std::string& statement : statements) {
    if (statement.starts_with("SET LOCAL ")) timeouts_.push_back(statement);
  }
  for (std::string& statement : statements) {
    Command c;
    c.simple = true;
    c.text = std::move(statement);
    pending_.push_back(std::move(c));
  }
  begin_count_ = pending_.size();
  begin_pending_ = begin_count_ > 0;
}

Status PgConnection::DeferOpening(std::string_view sql, const std::vector<SqlValue>& params) {
  pending_.push_back(FP_TRY(Held(std::string(sql), params)));
  ++begin_count_;
  begin_pending_ = true;
  return Ok();
}

void PgConnection::JoinWriteQueue() {
  if (!begin_pending_ || queued_ || read_only_) return;
  Command c;
  c.simple = true;
  c.text = "LOCK TABLE retry_queue IN EXCLUSIVE MODE";
  pending_.insert(pending_.begin() + static_cast<std::ptrdiff_t>(snapshot_at_), std::move(c));
  ++begin_count_;
  ++snapshot_at_;
  queued_ = true;
}

void PgConnection::DropPending() {
  // A held-back statement's optimistic prepare was never sent: forget it.
  for (const Command& c : pending_) {
    if (!c.prepare.empty()) prepared_.erase(c.key);
  }
  pending_.clear();
  after_commit_.clear();
  begin_count_ = 0;
  begin_pending_ = false;
}

Status PgConnection::Run(std::string_view sql) {
  const bool reads_after = !after_commit_.empty() && sql == "COMMIT";
  // A simple query carries only statements without parameters (not DeferOpening's).
  const bool prepared_pending =
      std::any_of(pending_.begin(), pending_.end(), [](const Command& c) { return !c.simple; });
  if (writes_held_back() || reads_after || prepared_pending) {
    Command c;
    c.simple = true;
    c.borrowed_sql = sql;
    std::vector<Command> after;
    if (reads_after) after = std::exchange(after_commit_, {});
    FP_TRY(Pipeline(c, nullptr, reads_after ? &after : nullptr));
    return Ok();
  }
  if (begin_pending_ && queued_) queue_sent_ = true;
  std::string text;
  for (const Command& c : pending_) text += c.text + "; ";
  pending_.clear();
  begin_count_ = 0;
  begin_pending_ = false;
  text += sql;
  RoundTrip();
  PgResultPtr r(PQexec(conn_.get(), text.c_str()));
  ExecStatusType s = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) return Fail(Failure(sql, r.get()));
  if (sql == "COMMIT") commit_acknowledged_ = true;
  return Ok();
}

Result<std::vector<Row>> PgConnection::Rows(const PgResultPtr& r) {
  const int rows = PQntuples(r.get());
  const int cols = PQnfields(r.get());
  std::vector<Oid> types(static_cast<size_t>(cols));
  for (int c = 0; c < cols; ++c) types[static_cast<size_t>(c)] = PQftype(r.get(), c);
  std::vector<Row> out;
  out.reserve(static_cast<size_t>(rows));
  for (int i = 0; i < rows; ++i) {
    std::vector<SqlValue> values;
    values.reserve(static_cast<size_t>(cols));
    for (int c = 0; c < cols; ++c) {
      values.push_back(FP_TRY(DecodeValue(r.get(), i, c, types[static_cast<size_t>(c)])));
    }
    out.emplace_back(std::move(values));
  }
  return out;
}

Result<int64_t> PgConnection::Exec(std::string_view sql, const std::vector<SqlValue>& params) {
  PgResultPtr r = FP_TRY(Execute(sql, params));
  std::string_view tuples = PQcmdTuples(r.get());
  int64_t n = 0;
  std::from_chars(tuples.data(), tuples.data() + tuples.size(), n);
  return n;
}

}  // namespace fp::db::postgres
