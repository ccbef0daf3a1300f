#include "db/datastore.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "db/postgres/engine.h"
#include "db/request_effect.h"
#include "db/schema.h"
#include "db/sqlite/engine.h"

namespace fp::db {

Result<Uuid> UuidColumn(const Row& row, size_t i) {
  auto id = Uuid::Parse(row.Text(i));
  if (!id) return Fail(Error::Internal(fmt::format("corrupt uuid column {}", i)));
  return *id;
}

Result<std::optional<Uuid>> OptUuidColumn(const Row& row, size_t i) {
  if (row.IsNull(i)) return std::optional<Uuid>();
  return std::optional<Uuid>(FP_TRY(UuidColumn(row, i)));
}

Result<IpAddr> IpColumn(const Row& row, size_t i) {
  auto ip = IpAddr::FromKey(row.Text(i));
  if (!ip) return Fail(Error::Internal(fmt::format("corrupt address column {}", i)));
  return *ip;
}

Datastore::Datastore(std::string path, std::shared_ptr<const Clock> clock,
                     std::shared_ptr<Random> random)
    : path_(std::move(path)), clock_(std::move(clock)), random_(std::move(random)) {}

Datastore::~Datastore() = default;

Result<std::unique_ptr<Datastore>> Datastore::OpenSqlite(const std::string& path,
                                                         std::shared_ptr<const Clock> clock,
                                                         std::shared_ptr<Random> random,
                                                         OpenInterrupt* interrupt) {
  std::unique_ptr<Datastore> ds(new Datastore(path, std::move(clock), std::move(random)));
  ds->engine_ = FP_TRY(sqlite::SqliteEngine::Open(
      path, ds->sync_points_, *ds->clock_, *ds->engine_random_,
      [interrupt](sqlite::SqliteConnection& conn) { return MigrateSchema(conn, interrupt); }));
  return ds;
}

Result<std::unique_ptr<Datastore>> Datastore::OpenPostgres(const std::string& url,
                                                           std::shared_ptr<const Clock> clock,
                                                           std::shared_ptr<Random> random,
                                                           PostgresOptions options,
                                                           OpenInterrupt* interrupt) {
  // Not the URL: it may carry a password, and path_ is only for messages.
  std::unique_ptr<Datastore> ds(new Datastore("(PostgreSQL)", std::move(clock), std::move(random)));
  ds->engine_ = FP_TRY(postgres::PgEngine::Open(url, options, ds->sync_points_, *ds->clock_,
                                                *ds->engine_random_,
                                                [interrupt](postgres::PgConnection& conn) {
                                                  return MigratePostgresSchema(conn, interrupt);
                                                }));
  return ds;
}

Status DeferredDurability::Wait() {
  const int64_t seen = std::exchange(seen_, 0);
  return seen == 0 ? Ok() : ds_.engine_->WaitDurable(seen);
}

DeferredDurability::~DeferredDurability() {
  if (seen_ == 0) return;
  if (Status s = ds_.engine_->WaitDurable(seen_); !s) {
    // The log cannot be opened (a failed sync stops the process in SyncLog): the answer about
    // to leave could describe commits a crash would undo. Stop, as SyncLog does.
    std::fprintf(stderr,
                 "{\"level\":\"error\",\"msg\":\"cannot make what a request read durable; "
                 "stopping\",\"path\":\"%s\",\"error\":\"%s\"}\n",
                 ds_.path_.c_str(), s.error().message().c_str());
    std::abort();
  }
}

Status Datastore::RunWrite(const std::function<Status(Tx&)>& body) {
  // The hooks of the body's last run only: an engine that runs the body again (PostgreSQL's
  // retries) rolled the earlier runs back, and with them what they registered.
  std::vector<std::function<void(bool)>> hooks;
  Status done = engine_->Write([&](Connection& conn) -> Status {
    hooks.clear();
    Tx tx(conn, clock_->Now(), *random_, &hooks);
    FP_CHECK_OK(body(tx));
    return tx.RunAtEnd();
  });
  for (auto& hook : hooks) hook(static_cast<bool>(done));
  if (!done) (done.error().HttpStatus() < 500 ? refused_writes_ : failed_writes_).fetch_add(1);
  return done;
}

Status Datastore::RecordAnswerIn(RequestEffect& effect, Tx& tx, const EffectAnswer& answer) {
  return effect.RecordAnswerIn(tx, answer);
}

Status Datastore::RunTransaction(bool write, const std::function<Status(Tx&)>& body,
                                 bool wait_durable, DeferredDurability* deferred) {
  if (write) return RunWrite(body);
  read_transactions_.fetch_add(1, std::memory_order_relaxed);
  int64_t seen = 0;
  Status result = engine_->Read(
      [&](Connection& conn) {
        Tx tx(conn, clock_->Now(), *random_);
        return body(tx);
      },
      seen);
  // What this read saw leaves only once durable (see Engine::WaitDurable), now or at the end of
  // the caller's DeferredDurability scope.
  if (wait_durable) {
    if (deferred != nullptr) {
      if (&deferred->ds_ != this) {
        return Fail(Error::Internal("a read deferred its durability to another datastore"));
      }
      deferred->seen_ = std::max(deferred->seen_, seen);
    } else {
      FP_CHECK_OK(engine_->WaitDurable(seen));
    }
  }
  return result;
}

}  // namespace fp::db

namespace fp::db {

std::string PageClause(const PageRequest& page, std::string_view name_column,
                       std::string_view id_column, std::vector<SqlValue>& params) {
  std::string_view key = page.order == SortOrder::kIdAscending ? id_column : name_column;
  bool descending = page.order == SortOrder::kNameDescending;
  std::string sql;
  if (page.after) {
    sql += fmt::format(" AND {} {} ?", key, descending ? "<" : ">");
    params.emplace_back(*page.after);
  }
  sql += fmt::format(" ORDER BY {} {} LIMIT ?", key, descending ? "DESC" : "ASC");
  params.emplace_back(page.limit);
  return sql;
}

}  // namespace fp::db
