#pragma once

// /metrics in Prometheus text format (version 0.0.4), written by hand.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "app/store_stats.h"
#include "common/metrics.h"
#include "http/server.h"

namespace fp::api {

// The datastore's commit, sync and checkpoint counters.
std::string StoreMetrics(const app::StoreCounters& c);
// Write transactions by outcome, and SQLite's batches by size.
std::string TransactionMetrics(const app::StoreCounters& c);
// The saga tables' and the database file's size, and what pruning removed.
std::string HistoryMetrics(const app::HistoryCounters& h);
// The process's own CPU time and context switches (getrusage: every thread, ended ones included),
// so that a benchmark can tell the hand-offs between threads a change removed from the time it
// saved.
std::string ProcessMetrics();
// Connection admission counters (HttpServerStats).
std::string AdmissionMetrics(const http::HttpServerStats& s);

// Requests by method, route template and status, and their latency by method and route. The
// route is the pattern that matched ("/v1/floating-ips/{floating_ip}"), "/metrics" or
// "/v1/ping", or "unmatched": never a path, so the label set stays bounded. Every route's
// latency series is exported from the start. Thread-safe.
class HttpMetrics {
 public:
  explicit HttpMetrics(const std::vector<std::pair<std::string, std::string>>& routes);
  void Record(std::string_view method, std::string_view route, int status, double seconds);
  // An audited request (a mutating one, or a failed authentication) answered by this server.
  void RecordAudited(bool success) { audited_.Add({success ? "success" : "error"}); }
  void Render(std::string& out) const;

 private:
  metrics::CounterFamily requests_;
  metrics::HistogramFamily duration_;
  metrics::CounterFamily audited_;
};

}  // namespace fp::api
