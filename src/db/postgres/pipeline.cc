// How a PgConnection's statements reach the server (connection.h): each prepared once per
// connection, the ones held back (the opening, ExecLater's writes, QueryLater's and
// QueryEachLast's reads, the reads after a commit) sent with the next statement or the COMMIT
// in one exchange (libpq's pipeline mode), and each result matched to its statement.

#include <fmt/format.h>

#include <memory>
#include <optional>
#include <utility>

#include "db/postgres/connection.h"  // what this file implements, beside connection.cc
#include "db/postgres/wire_values.h"

namespace fp::db::postgres {

namespace {

// The SQLSTATE fp_expect_rows raises (schema_postgres.cc, migration 14).
constexpr std::string_view kExpectedRows = "FPX01";

}  // namespace

Status PgConnection::Resolve(std::string_view sql, const std::vector<SqlValue>& params,
                             Command& c) {
  const size_t n = params.size();
  c.key.assign(sql);
  c.key += '\x01';
  c.types.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const SqlValue& p = params[i];
    char sig = 'n';
    if (std::holds_alternative<int64_t>(p)) {
      sig = 'i';
      c.types[i] = kInt8Oid;
    } else if (std::holds_alternative<double>(p)) {
      sig = 'd';
      c.types[i] = kFloat8Oid;
    } else if (std::holds_alternative<std::string>(p)) {
      sig = 't';
      c.types[i] = kTextOid;
    } else if (std::holds_alternative<Blob>(p)) {
      sig = 'b';
      c.types[i] = kByteaOid;
    }
    c.key += sig;
  }
  auto it = prepared_.find(c.key);
  if (it != prepared_.end()) {
    c.name = it->second;
    return Ok();
  }
  int count = 0;
  c.prepare = TranslatePlaceholders(sql, count);
  if (static_cast<size_t>(count) != n) {
    return Fail(Error::Internal(
        fmt::format("postgres: {}: {} placeholders, {} parameters", Shorten(sql), count, n)));
  }
  c.name = fmt::format("fp{}", next_name_++);
  // Named now, so that a second statement like it in the same pipeline does not prepare again;
  // forgotten if the prepare does not succeed.
  prepared_.emplace(c.key, c.name);
  return Ok();
}

Result<PgResultPtr> PgConnection::Execute(std::string_view sql,
                                          const std::vector<SqlValue>& params) {
  if (ended_) return Fail(StatementAfterTheLast("postgres", Shorten(sql)));
  Command c;
  c.borrowed_sql = sql;
  c.borrowed = &params;
  FP_CHECK_OK(Resolve(sql, params, c));
  // What is held back, and a first use's prepare, go in one exchange with the execution.
  if (!pending_.empty() || !c.prepare.empty()) return Pipeline(c);
  BoundParams b(params);
  RoundTrip();
  PgResultPtr r(PQexecPrepared(conn_.get(), c.name.c_str(), b.count(), b.v(), b.l(), b.f(),
                               /*resultFormat=*/0));
  ExecStatusType s = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) return Fail(Failure(sql, r.get()));
  return r;
}

Status PgConnection::ExecLater(std::string_view sql, const std::vector<SqlValue>& params,
                               int64_t rows, const Error& otherwise) {
  if (ended_) return Fail(StatementAfterTheLast("postgres", Shorten(sql)));
  Command c = FP_TRY(Held(
      rows >= 0
          ? fmt::format("WITH w AS ({} RETURNING 1) SELECT fp_expect_rows(count(*), {}) FROM w",
                        sql, rows)
          : std::string(sql),
      params));
  if (rows >= 0) c.otherwise = otherwise;
  pending_.push_back(std::move(c));
  return Ok();
}

Result<PgConnection::Command> PgConnection::Held(std::string sql,
                                                 const std::vector<SqlValue>& params) {
  Command c;
  c.text = std::move(sql);
  FP_CHECK_OK(Resolve(c.text, params, c));
  c.owned = params;
  return c;
}

Status PgConnection::QueryLater(std::string_view sql, const std::vector<SqlValue>& params,
                                std::function<void(Result<std::vector<Row>>)> sink) {
  if (ended_) return Fail(StatementAfterTheLast("postgres", Shorten(sql)));
  if (read_only_) return Fail(HeldBackReadInARead("postgres", Shorten(sql)));
  Command c = FP_TRY(Held(std::string(sql), params));
  c.sink = std::move(sink);
  pending_.push_back(std::move(c));
  return Ok();
}

Status PgConnection::QueryAfterCommit(std::string_view sql, const std::vector<SqlValue>& params,
                                      std::function<void(std::vector<Row>)> sink) {
  if (ended_) return Fail(StatementAfterTheLast("postgres", Shorten(sql)));
  if (read_only_) {
    return Fail(Error::Internal(fmt::format(
        "postgres: {}: a read after the commit (QueryAfterCommit) in a read transaction",
        Shorten(sql))));
  }
  Command c = FP_TRY(Held(std::string(sql), params));
  // Its prepare runs after the COMMIT: a statement of this transaction with the same text must
  // not take the name for prepared before then. Named once it has run (Pipeline).
  if (!c.prepare.empty()) prepared_.erase(c.key);
  c.after_commit = std::move(sink);
  after_commit_.push_back(std::move(c));
  return Ok();
}

Result<PgResultPtr> PgConnection::Pipeline(const Command& last, const Command* then,
                                           std::vector<Command>* after) {
  PGconn* c = conn_.get();
  if (begin_pending_ && queued_) queue_sent_ = true;
  std::vector<Command> held = std::exchange(pending_, {});
  begin_count_ = 0;
  begin_pending_ = false;
  std::vector<const Command*> commands;
  commands.reserve(held.size() + 2);
  for (const Command& h : held) commands.push_back(&h);
  commands.push_back(&last);
  const size_t last_at = commands.size() - 1;
  if (then != nullptr) commands.push_back(then);
  // The reads after the commit, in a transaction of their own, which takes its snapshot after
  // the commit. Never serializable: their predicate locks would make later writes fail.
  const size_t after_at = commands.size();
  std::vector<Command> wrap;
  if (after != nullptr && !after->empty()) {
    wrap.reserve(timeouts_.size() + 2);
    auto simple = [&](std::string text) {
      Command k;
      k.simple = true;
      k.text = std::move(text);
      wrap.push_back(std::move(k));
    };
    simple("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
    for (const std::string& t : timeouts_) simple(t);
    simple("COMMIT");
    for (size_t i = 0; i + 1 < wrap.size(); ++i) commands.push_back(&wrap[i]);
    for (const Command& a : *after) commands.push_back(&a);
    commands.push_back(&wrap.back());
  }
  // Whether a read after the commit failed (not merely skipped because the write failed).
  bool after_failed = false;
  // A prepare that is not known to have succeeded is forgotten (the server does not hold it);
  // the reads after the commit were never named (QueryAfterCommit) until theirs succeeds.
  std::vector<bool> prepare_ok(commands.size(), false);
  auto forget_failed_prepares = [&] {
    for (size_t i = 0; i < after_at; ++i) {
      if (!commands[i]->prepare.empty() && !prepare_ok[i]) prepared_.erase(commands[i]->key);
    }
  };
  // A pipeline that cannot be sent whole, or left, leaves the connection in a state no later
  // statement can use (commands queued, or still in pipeline mode): it is given up, and the
  // engine runs the transaction again on another (as after a lost connection).
  auto give_up = [&](std::string_view what) {
    Error e = Failure(what, nullptr);
    unusable_ = true;
    forget_failed_prepares();
    return Fail(e);
  };
  if (PQenterPipelineMode(c) != 1) return give_up("enter pipeline mode");
  // Until the pipeline is left: whatever ends this early (an exception too) leaves a
  // connection no later statement can use.
  unusable_ = true;
  // What was sent, in order: each command's prepare (if any) and its execution.
  struct Sent {
    size_t command;
    bool prepare;
  };
  std::vector<Sent> sent;
  bool queued = true;
  for (size_t i = 0; i < commands.size() && queued; ++i) {
    const Command& k = *commands[i];
    if (k.simple) {
      std::string text(k.sql());
      queued = PQsendQueryParams(c, text.c_str(), 0, nullptr, nullptr, nullptr, nullptr, 0) == 1;
      sent.push_back({i, false});
      continue;
    }
    const int n = static_cast<int>(k.types.size());
    if (!k.prepare.empty()) {
      queued =
          PQsendPrepare(c, k.name.c_str(), k.prepare.c_str(), n, n ? k.types.data() : nullptr) == 1;
      sent.push_back({i, true});
      if (!queued) break;
    }
    BoundParams b(k.params());
    queued = PQsendQueryPrepared(c, k.name.c_str(), b.count(), b.v(), b.l(), b.f(),
                                 /*resultFormat=*/0) == 1;
    sent.push_back({i, false});
  }
  queued = queued && PQpipelineSync(c) == 1;
  RoundTrip();
  if (!queued) return give_up(last.sql());
  // One result per command, each followed by a null, then the sync's. After a failure the
  // later commands answer "aborted"; the first failure is the answer.
  std::optional<Error> failed;
  PgResultPtr out;
  for (const Sent& s : sent) {
    const Command& k = *commands[s.command];
    PgResultPtr r(PQgetResult(c));
    if (!r) {  // the connection broke mid-exchange
      if (s.command >= after_at && !failed) {
        after_failed = true;  // after the COMMIT's answer: the write has committed
        break;
      }
      if (!failed) failed = Failure(k.sql(), nullptr);
      break;
    }
    while (PGresult* rest = PQgetResult(c)) PQclear(rest);
    ExecStatusType status = PQresultStatus(r.get());
    if (status == PGRES_PIPELINE_ABORTED) continue;
    if (s.command >= after_at && !failed) {
      // After the commit: a failure is the reads' own (not the write's, not retried).
      if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
        after_failed = true;
      } else if (s.prepare) {
        prepare_ok[s.command] = true;
        prepared_.emplace(k.key, k.name);
      } else if (k.after_commit) {
        auto rows = Rows(r);
        if (rows) k.after_commit(std::move(*rows));
      }
      continue;
    }
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
      if (!failed) {
        failed = Failure(k.sql(), r.get());
        if (k.otherwise && SqlState(r.get()) == kExpectedRows) failed = *k.otherwise;
        if (s.command < last_at) held_back_failure_ = failed;
      }
      continue;
    }
    if (s.prepare) {
      prepare_ok[s.command] = true;
    } else if (s.command == last_at) {
      if (k.simple && k.sql() == "COMMIT") commit_acknowledged_ = true;
      out = std::move(r);
    } else if (k.sink) {
      k.sink(Rows(r));
    }
  }
  forget_failed_prepares();
  if (PQstatus(c) == CONNECTION_OK) {
    for (PGresult* r = PQgetResult(c); r != nullptr; r = PQgetResult(c)) {
      const bool sync = PQresultStatus(r) == PGRES_PIPELINE_SYNC;
      PQclear(r);
      if (sync) break;
    }
  }
  if (PQexitPipelineMode(c) != 1) {
    if (failed) return Fail(*failed);
    if (after_failed) return out;  // the write committed; the connection stays unusable
    return give_up("exit pipeline mode");
  }
  unusable_ = false;
  if (after_failed && !failed && !broken() && in_transaction()) {
    // The write committed; the read's transaction failed and is still open.
    PgResultPtr rollback(PQexec(c, "ROLLBACK"));
    RoundTrip();
    if (!rollback || PQresultStatus(rollback.get()) != PGRES_COMMAND_OK) unusable_ = true;
  }
  if (failed) return Fail(*failed);
  if (!out) return Fail(Failure(last.sql(), nullptr));
  return out;
}

Result<std::vector<Row>> PgConnection::Query(std::string_view sql,
                                             const std::vector<SqlValue>& params) {
  return Rows(FP_TRY(Execute(sql, params)));
}

Result<std::vector<std::vector<Row>>> PgConnection::QueryEachLast(
    std::string_view sql, const std::vector<std::vector<SqlValue>>& params) {
  if (!read_only_ || params.size() < 2) return Connection::QueryEachLast(sql, params);
  if (ended_) return Fail(StatementAfterTheLast("postgres", Shorten(sql)));
  // All but the last held back, their rows to slots the sinks share with this call. The last
  // goes as QueryLast, with the held ones and the COMMIT in one exchange: its rows come back
  // only when the COMMIT succeeded, and then every held read's came back too. A call refused
  // before that exchange (parameter lists of different shapes) takes back what it held, so
  // that no sink of it is left to run.
  struct Slots {
    std::vector<std::vector<Row>> rows;
    std::optional<Error> failed;
  };
  auto slots = std::make_shared<Slots>();
  slots->rows.resize(params.size());
  const size_t held_from = pending_.size();
  auto take_back = [&] {
    for (size_t i = held_from; i < pending_.size(); ++i) {
      if (!pending_[i].prepare.empty()) prepared_.erase(pending_[i].key);
    }
    if (pending_.size() > held_from) {
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(held_from), pending_.end());
    }
  };
  for (size_t i = 0; i + 1 < params.size(); ++i) {
    Result<Command> c = Held(std::string(sql), params[i]);
    if (!c) {
      take_back();
      return Fail(c.error());
    }
    c->sink = [slots, i](Result<std::vector<Row>> rows) {
      if (rows) {
        slots->rows[i] = std::move(*rows);
      } else if (!slots->failed) {
        slots->failed = rows.error();
      }
    };
    pending_.push_back(std::move(*c));
  }
  Result<std::vector<Row>> last = QueryLast(sql, params.back());
  if (!last) {
    take_back();  // nothing when the exchange was made: it took every held statement
    return Fail(last.error());
  }
  slots->rows.back() = std::move(*last);
  if (slots->failed) return Fail(*slots->failed);
  return std::move(slots->rows);
}

Result<std::vector<Row>> PgConnection::QueryLast(std::string_view sql,
                                                 const std::vector<SqlValue>& params) {
  if (!read_only_) return Query(sql, params);
  if (ended_) return Fail(StatementAfterTheLast("postgres", Shorten(sql)));
  Command c;
  c.borrowed_sql = sql;
  c.borrowed = &params;
  FP_CHECK_OK(Resolve(sql, params, c));
  Command commit;
  commit.simple = true;
  commit.borrowed_sql = "COMMIT";
  PgResultPtr r = FP_TRY(Pipeline(c, &commit));
  ended_ = true;
  return Rows(r);
}

}  // namespace fp::db::postgres
