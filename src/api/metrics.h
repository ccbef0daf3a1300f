#pragma once

// /metrics in Prometheus text format (version 0.0.4), written by hand.

#include <string>

#include "app/store_stats.h"
#include "http/server.h"

namespace fp::api {

// The datastore's commit, sync and checkpoint counters.
std::string StoreMetrics(const app::StoreCounters& c);
// The saga tables' and the database file's size, and what pruning removed.
std::string HistoryMetrics(const app::HistoryCounters& h);
// Connection admission counters (HttpServerStats).
std::string AdmissionMetrics(const http::HttpServerStats& s);

}  // namespace fp::api
