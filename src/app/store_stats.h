#pragma once

#include <array>
#include <cstdint>

#include "common/error.h"

namespace fp::db {
class Datastore;
}  // namespace fp::db

namespace fp::app {

// The datastore's counters and sizes, as /metrics reports them.
struct StoreCounters {
  int64_t durable_commits = 0;      // write transactions committed
  int64_t log_syncs = 0;            // syncs of the write-ahead log
  int64_t sqlite_commits = 0;       // SQLite transactions that carried the durable commits
  int64_t checkpoints = 0;          // checkpoints of the log into the database file
  int64_t log_restarts = 0;         // times the log was emptied after a checkpoint
  int64_t log_limit_restarts = 0;   // of those, the ones made with writes waiting at the limit
  int64_t round_trips = 0;          // exchanges with the database server (PostgreSQL)
  int64_t transaction_retries = 0;  // transactions run again after a conflict (PostgreSQL)
  int64_t queued_transactions = 0;  // transaction runs that waited in the write queue (PostgreSQL)
  int64_t refused_writes = 0;       // write transactions refused inside (4xx): no sync
  int64_t failed_writes = 0;        // write transactions that failed otherwise
  int64_t read_transactions = 0;    // read transactions run
  int connections_open = 0;         // connections to the database (pooled or SQLite readers)
  int connection_waiters = 0;       // transactions waiting now for one of them
  // Engine transactions by writes carried: 1, 2, 3-4, ..., 65-128, more.
  std::array<int64_t, 9> batch_sizes{};
  int64_t batched_writes = 0;
};

// What the bounded history holds and removed, and the files' sizes.
struct HistoryCounters {
  int64_t saga_rows = 0;                // sagas in any state
  int64_t sagas_pruned = 0;             // finished sagas deleted after the retention
  int64_t idempotency_keys_pruned = 0;  // keys deleted after the retention
  int64_t database_file_bytes = 0;
  int64_t log_file_bytes = 0;
};

// Reads the datastore's statistics. Thread-safe.
class StoreStats {
 public:
  explicit StoreStats(db::Datastore& ds) : ds_(ds) {}

  // In-memory counters: never fails, costs no query.
  StoreCounters Counters() const;
  // Reads the history's counters (a read transaction); the datastore's errors.
  Result<HistoryCounters> History() const;

 private:
  db::Datastore& ds_;
};

}  // namespace fp::app
