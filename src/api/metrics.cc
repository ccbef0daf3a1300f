#include "api/metrics.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <iterator>

namespace fp::api {

std::string StoreMetrics(const app::StoreCounters& c) {
  return fmt::format(
      "# HELP floatplane_durable_commits_total Write transactions committed to the "
      "datastore.\n# TYPE floatplane_durable_commits_total counter\n"
      "floatplane_durable_commits_total {}\n"
      "# HELP floatplane_log_syncs_total Syncs of the datastore's write-ahead log (one "
      "sync makes every commit written before it durable).\n"
      "# TYPE floatplane_log_syncs_total counter\nfloatplane_log_syncs_total {}\n"
      "# HELP floatplane_sqlite_commits_total SQLite transactions that carried the "
      "durable commits (concurrent writes share one).\n"
      "# TYPE floatplane_sqlite_commits_total counter\nfloatplane_sqlite_commits_total {}\n"
      "# HELP floatplane_checkpoints_total Checkpoints of the write-ahead log into the "
      "database file (run in the background).\n"
      "# TYPE floatplane_checkpoints_total counter\nfloatplane_checkpoints_total {}\n"
      "# HELP floatplane_log_restarts_total Times the write-ahead log was emptied after a "
      "checkpoint, so that it starts over instead of growing.\n"
      "# TYPE floatplane_log_restarts_total counter\nfloatplane_log_restarts_total {}\n"
      "# HELP floatplane_log_limit_restarts_total Of those, the restarts made with writes "
      "waiting because the log had reached its limit (checkpoints falling behind).\n"
      "# TYPE floatplane_log_limit_restarts_total counter\n"
      "floatplane_log_limit_restarts_total {}\n"
      "# HELP floatplane_db_round_trips_total Exchanges with the database server "
      "(PostgreSQL; 0 on SQLite, which runs in the process).\n"
      "# TYPE floatplane_db_round_trips_total counter\nfloatplane_db_round_trips_total {}\n"
      "# HELP floatplane_db_transaction_retries_total Transactions run again, whole, after "
      "a serialization failure or a lost connection (PostgreSQL).\n"
      "# TYPE floatplane_db_transaction_retries_total counter\n"
      "floatplane_db_transaction_retries_total {}\n"
      "# HELP floatplane_db_queued_transactions_total Write transaction runs that waited "
      "their turn in the write queue: those that ask for it and every later run of a write "
      "after a serialization failure, a deadlock or a timeout (PostgreSQL; 0 on SQLite).\n"
      "# TYPE floatplane_db_queued_transactions_total counter\n"
      "floatplane_db_queued_transactions_total {}\n",
      c.durable_commits, c.log_syncs, c.sqlite_commits, c.checkpoints, c.log_restarts,
      c.log_limit_restarts, c.round_trips, c.transaction_retries, c.queued_transactions);
}

std::string ProcessMetrics() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return "";
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  std::string out;
  metrics::Render(out, "process_cpu_seconds_total",
                  "CPU time the server's threads have used, user and system.", "counter",
                  {{{}, seconds(usage.ru_utime) + seconds(usage.ru_stime)}});
  metrics::Render(out, "floatplane_process_context_switches_total",
                  "Times a thread of the server gave up its core: voluntary (it waited for a "
                  "lock, a condition, the disk or the network) or involuntary (preempted).",
                  "counter",
                  {{{{"kind", "voluntary"}}, static_cast<double>(usage.ru_nvcsw)},
                   {{{"kind", "involuntary"}}, static_cast<double>(usage.ru_nivcsw)}});
  return out;
}

std::string TransactionMetrics(const app::StoreCounters& c) {
  std::string out;
  metrics::Render(out, "floatplane_db_transactions_total",
                  "Write transactions by outcome: committed (and durable), refused inside (a "
                  "4xx decided there, or an attach or detach that found the IP as asked "
                  "already: rolled back, no log write, no sync), failed (the database's "
                  "errors).",
                  "counter",
                  {{{{"outcome", "committed"}}, static_cast<double>(c.durable_commits)},
                   {{{"outcome", "refused"}}, static_cast<double>(c.refused_writes)},
                   {{{"outcome", "failed"}}, static_cast<double>(c.failed_writes)}});
  metrics::Render(out, "floatplane_db_read_transactions_total",
                  "Read transactions run (a request's reads, the control loops' reads).", "counter",
                  {{{}, static_cast<double>(c.read_transactions)}});
  metrics::Render(out, "floatplane_db_connections_open",
                  "Connections open to the database: PostgreSQL's pool (opened as transactions "
                  "need them, one at a time, up to --postgres-pool-size) and those a transaction "
                  "inside another takes; SQLite's reader connections.",
                  "gauge", {{{}, static_cast<double>(c.connections_open)}});
  metrics::Render(out, "floatplane_db_connection_waiters",
                  "Transactions waiting now for a database connection (PostgreSQL: all in use, "
                  "or one being opened; SQLite: reads, every reader busy). Often above zero: "
                  "the pool is too small for the load, or the database is slow to answer.",
                  "gauge", {{{}, static_cast<double>(c.connection_waiters)}});
  // A histogram of the writes each SQLite transaction carried (group commit).
  out +=
      "# HELP floatplane_db_write_batch_size Write transactions carried by each transaction "
      "of the engine (SQLite: concurrent writes share one, and one sync; PostgreSQL: one "
      "each).\n"
      "# TYPE floatplane_db_write_batch_size histogram\n";
  int64_t cumulative = 0;
  for (size_t b = 0; b < c.batch_sizes.size(); ++b) {
    cumulative += c.batch_sizes[b];
    std::string le = b + 1 < c.batch_sizes.size() ? std::to_string(int64_t{1} << b) : "+Inf";
    out += fmt::format("floatplane_db_write_batch_size_bucket{{le=\"{}\"}} {}\n", le, cumulative);
  }
  out += fmt::format(
      "floatplane_db_write_batch_size_sum {}\nfloatplane_db_write_batch_size_count {}\n",
      c.batched_writes, cumulative);
  return out;
}

std::string HistoryMetrics(const app::HistoryCounters& h) {
  return fmt::format(
      "# HELP floatplane_saga_rows Sagas in the datastore, in any state (finished ones are "
      "pruned after the history retention; on PostgreSQL, past 100000 the planner's "
      "estimate).\n# TYPE floatplane_saga_rows gauge\n"
      "floatplane_saga_rows {}\n"
      "# HELP floatplane_sagas_pruned_total Finished sagas deleted, with their node events, "
      "after the history retention.\n# TYPE floatplane_sagas_pruned_total counter\n"
      "floatplane_sagas_pruned_total {}\n"
      "# HELP floatplane_idempotency_keys_pruned_total Idempotency keys deleted after the "
      "history retention.\n# TYPE floatplane_idempotency_keys_pruned_total counter\n"
      "floatplane_idempotency_keys_pruned_total {}\n"
      "# HELP floatplane_database_size_bytes Size of the database file (PostgreSQL: of the "
      "database; pages freed by "
      "pruning are reused, so it stops growing).\n"
      "# TYPE floatplane_database_size_bytes gauge\nfloatplane_database_size_bytes {}\n"
      "# HELP floatplane_log_size_bytes Size of the write-ahead log file.\n"
      "# TYPE floatplane_log_size_bytes gauge\nfloatplane_log_size_bytes {}\n",
      h.saga_rows, h.sagas_pruned, h.idempotency_keys_pruned, h.database_file_bytes,
      h.log_file_bytes);
}

std::string AdmissionMetrics(const http::HttpServerStats& s) {
  return fmt::format(
      "# HELP floatplane_http_connections Client connections open now, idle ones included.\n"
      "# TYPE floatplane_http_connections gauge\nfloatplane_http_connections {}\n"
      "# HELP floatplane_http_refused_total Connections (capacity, per_client) and complete "
      "requests (busy) answered 503 by admission instead of being served.\n"
      "# TYPE floatplane_http_refused_total counter\n"
      "floatplane_http_refused_total{{reason=\"capacity\"}} {}\n"
      "floatplane_http_refused_total{{reason=\"per_client\"}} {}\n"
      "floatplane_http_refused_total{{reason=\"busy\"}} {}\n"
      "# HELP floatplane_http_request_timeouts_total Requests that did not arrive completely "
      "within the request timeout (connection closed, 408 where a request had begun).\n"
      "# TYPE floatplane_http_request_timeouts_total counter\n"
      "floatplane_http_request_timeouts_total {}\n",
      s.open_connections, s.refused_over_capacity, s.refused_per_client, s.refused_busy,
      s.request_timeouts);
}

HttpMetrics::HttpMetrics(const std::vector<std::pair<std::string, std::string>>& routes)
    : requests_("floatplane_http_requests_total",
                "API requests answered, by method, route template and status.",
                {"method", "route", "status"}),
      duration_("floatplane_http_request_duration_seconds",
                "Time from a complete API request to its answer, by method and route template.",
                {"method", "route"},
                {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}),
      audited_("floatplane_audit_entries_total",
               "Audit log entries of the requests this server answered (mutating requests and "
               "failed authentications), by result.",
               {"result"}) {
  audited_.Touch({"success"});
  audited_.Touch({"error"});
  for (const auto& [method, route] : routes) duration_.Touch({method, route});
  for (const char* route : {"/metrics", "/v1/ping"}) duration_.Touch({"GET", route});
}

void HttpMetrics::Record(std::string_view method, std::string_view route, int status,
                         double seconds) {
  // A method is the client's text: any but the known ones is "OTHER", so that the label set
  // stays bounded whatever clients send.
  static constexpr std::string_view kKnown[] = {"GET",    "HEAD",    "POST", "PUT",
                                                "DELETE", "OPTIONS", "PATCH"};
  bool known = std::find(std::begin(kKnown), std::end(kKnown), method) != std::end(kKnown);
  std::string m(known ? method : "OTHER"), r(route);
  requests_.Add({m, r, std::to_string(status)});
  duration_.Observe({m, r}, seconds);
}

void HttpMetrics::Render(std::string& out) const {
  requests_.Render(out);
  duration_.Render(out);
  audited_.Render(out);
}

}  // namespace fp::api
