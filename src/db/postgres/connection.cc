#include "db/postgres/connection.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <optional>
#include <utility>

namespace fp::db::postgres {

namespace {

// Type OIDs (pg_type.dat): stable across PostgreSQL versions.
constexpr Oid kBoolOid = 16;
constexpr Oid kByteaOid = 17;
constexpr Oid kInt8Oid = 20;
constexpr Oid kInt2Oid = 21;
constexpr Oid kInt4Oid = 23;
constexpr Oid kTextOid = 25;
constexpr Oid kFloat4Oid = 700;
constexpr Oid kFloat8Oid = 701;
constexpr Oid kNumericOid = 1700;

std::string Shorten(std::string_view sql) {
  return std::string(sql.substr(0, 120)) + (sql.size() > 120 ? "..." : "");
}

std::string Trimmed(const char* message) {
  std::string m = message ? message : "";
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  return m;
}

// Errors: Internal for a bytea value not in the hex format (never its text as bytes).
Result<SqlValue> Decode(const PGresult* r, int row, int col, Oid type) {
  if (PQgetisnull(r, row, col)) return SqlValue(nullptr);
  const char* v = PQgetvalue(r, row, col);
  size_t len = static_cast<size_t>(PQgetlength(r, row, col));
  std::string_view text(v, len);
  switch (type) {
    case kInt2Oid:
    case kInt4Oid:
    case kInt8Oid: {
      int64_t n = 0;
      std::from_chars(text.data(), text.data() + text.size(), n);
      return n;
    }
    case kBoolOid:
      return int64_t{text == "t" ? 1 : 0};
    case kNumericOid: {
      if (text.find_first_of(".eEN") == std::string_view::npos) {
        int64_t n = 0;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
        if (ec == std::errc() && end == text.data() + text.size()) return n;
      }
      return std::strtod(std::string(text).c_str(), nullptr);
    }
    case kFloat4Oid:
    case kFloat8Oid:
      return std::strtod(std::string(text).c_str(), nullptr);
    case kByteaOid: {
      Blob b;
      if (!DecodeByteaHex(text, b.bytes)) {
        return Fail(Error::Internal("a bytea result is not in the hex format (bytea_output)"));
      }
      return b;
    }
    default:
      return std::string(text);
  }
}

}  // namespace

Result<std::unique_ptr<PgConnection>> PgConnection::Open(const std::string& url) {
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

Status PgConnection::Run(std::string_view sql) {
  std::string text;
  for (const std::string& s : std::exchange(pending_begin_, {})) text += s + "; ";
  text += sql;
  RoundTrip();
  PgResultPtr r(PQexec(conn_.get(), text.c_str()));
  ExecStatusType s = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) return Fail(Failure(sql, r.get()));
  return Ok();
}

Result<PgResultPtr> PgConnection::Execute(std::string_view sql,
                                          const std::vector<SqlValue>& params) {
  const size_t n = params.size();
  std::string key(sql);
  key += '\x01';
  std::vector<Oid> types(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const SqlValue& p = params[i];
    char sig = 'n';
    if (std::holds_alternative<int64_t>(p)) {
      sig = 'i';
      types[i] = kInt8Oid;
    } else if (std::holds_alternative<double>(p)) {
      sig = 'd';
      types[i] = kFloat8Oid;
    } else if (std::holds_alternative<std::string>(p)) {
      sig = 't';
      types[i] = kTextOid;
    } else if (std::holds_alternative<Blob>(p)) {
      sig = 'b';
      types[i] = kByteaOid;
    }
    key += sig;
  }
  auto it = prepared_.find(key);
  std::string translated;  // set when the statement is to be prepared first
  std::string name;
  if (it == prepared_.end()) {
    int count = 0;
    translated = TranslatePlaceholders(sql, count);
    if (static_cast<size_t>(count) != n) {
      return Fail(Error::Internal(
          fmt::format("postgres: {}: {} placeholders, {} parameters", Shorten(sql), count, n)));
    }
    name = fmt::format("fp{}", prepared_.size() + 1);
    if (pending_begin_.empty()) {
      RoundTrip();
      PgResultPtr r(PQprepare(conn_.get(), name.c_str(), translated.c_str(), static_cast<int>(n),
                              n ? types.data() : nullptr));
      if (!r || PQresultStatus(r.get()) != PGRES_COMMAND_OK) return Fail(Failure(sql, r.get()));
      it = prepared_.emplace(std::move(key), name).first;
      translated.clear();
    }
  } else {
    name = it->second;
  }
  std::vector<std::string> text(n);
  std::vector<const char*> values(n, nullptr);
  std::vector<int> lengths(n, 0);
  std::vector<int> formats(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const SqlValue& p = params[i];
    if (auto* v = std::get_if<int64_t>(&p)) {
      text[i] = std::to_string(*v);
      values[i] = text[i].c_str();
    } else if (auto* d = std::get_if<double>(&p)) {
      text[i] = fmt::format("{}", *d);  // shortest text that reads back as the same double
      values[i] = text[i].c_str();
    } else if (auto* s = std::get_if<std::string>(&p)) {
      values[i] = s->c_str();
    } else if (auto* b = std::get_if<Blob>(&p)) {
      values[i] = b->bytes.data();
      lengths[i] = static_cast<int>(b->bytes.size());
      formats[i] = 1;
    }
  }
  if (!pending_begin_.empty()) {
    bool prepared = false;
    auto r = ExecuteAfterBegin(sql, name, translated, types, values, lengths, formats, prepared);
    if (prepared) prepared_.emplace(std::move(key), std::move(name));
    return r;
  }
  RoundTrip();
  PgResultPtr r(PQexecPrepared(conn_.get(), name.c_str(), static_cast<int>(n),
                               n ? values.data() : nullptr, n ? lengths.data() : nullptr,
                               n ? formats.data() : nullptr, /*resultFormat=*/0));
  ExecStatusType s = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) return Fail(Failure(sql, r.get()));
  return r;
}

Result<PgResultPtr> PgConnection::ExecuteAfterBegin(
    std::string_view sql, const std::string& name, const std::string& translated,
    const std::vector<Oid>& types, const std::vector<const char*>& values,
    const std::vector<int>& lengths, const std::vector<int>& formats, bool& prepared) {
  PGconn* c = conn_.get();
  const std::vector<std::string> begin = std::exchange(pending_begin_, {});
  const int n = static_cast<int>(values.size());
  // A pipeline that cannot be sent whole, or left, leaves the connection in a state no later
  // statement can use (commands queued, or still in pipeline mode): it is given up, and the
  // engine runs the transaction again on another (as after a lost connection).
  auto give_up = [&](std::string_view what) {
    Error e = Failure(what, nullptr);
    unusable_ = true;
    return Fail(e);
  };
  if (PQenterPipelineMode(c) != 1) return give_up("enter pipeline mode");
  // What was sent, in order: the begin's statements, the prepare, the execution.
  std::vector<std::string_view> sent;
  bool queued = true;
  for (const std::string& statement : begin) {
    queued = queued &&
             PQsendQueryParams(c, statement.c_str(), 0, nullptr, nullptr, nullptr, nullptr, 0) == 1;
    sent.push_back(statement);
  }
  if (!translated.empty()) {
    queued = queued &&
             PQsendPrepare(c, name.c_str(), translated.c_str(), n, n ? types.data() : nullptr) == 1;
    sent.push_back(sql);
  }
  queued = queued && PQsendQueryPrepared(c, name.c_str(), n, n ? values.data() : nullptr,
                                         n ? lengths.data() : nullptr, n ? formats.data() : nullptr,
                                         /*resultFormat=*/0) == 1;
  sent.push_back(sql);
  queued = queued && PQpipelineSync(c) == 1;
  RoundTrip();
  if (!queued) return give_up(sql);
  // One result per command, each followed by a null, then the sync's. After a failure the
  // later commands answer "aborted"; the first failure is the answer.
  std::optional<Error> failed;
  PgResultPtr last;
  for (size_t k = 0; k < sent.size(); ++k) {
    PgResultPtr r(PQgetResult(c));
    if (!r) {  // the connection broke mid-exchange
      if (!failed) failed = Failure(sent[k], nullptr);
      break;
    }
    while (PGresult* rest = PQgetResult(c)) PQclear(rest);
    ExecStatusType s = PQresultStatus(r.get());
    if (s == PGRES_PIPELINE_ABORTED) continue;
    if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) {
      if (!failed) failed = Failure(sent[k], r.get());
      continue;
    }
    if (!translated.empty() && k + 2 == sent.size()) prepared = true;
    if (k + 1 == sent.size()) last = std::move(r);
  }
  if (!broken()) {
    for (PGresult* r = PQgetResult(c); r != nullptr; r = PQgetResult(c)) {
      const bool sync = PQresultStatus(r) == PGRES_PIPELINE_SYNC;
      PQclear(r);
      if (sync) break;
    }
  }
  if (PQexitPipelineMode(c) != 1) {
    if (failed) {
      unusable_ = true;
      return Fail(*failed);
    }
    return give_up("exit pipeline mode");
  }
  if (failed) return Fail(*failed);
  return last;
}

Result<std::vector<Row>> PgConnection::Query(std::string_view sql,
                                             const std::vector<SqlValue>& params) {
  PgResultPtr r = FP_TRY(Execute(sql, params));
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
      values.push_back(FP_TRY(Decode(r.get(), i, c, types[static_cast<size_t>(c)])));
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
