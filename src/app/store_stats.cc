#include "app/store_stats.h"

#include <algorithm>

#include "db/datastore.h"
#include "db/idempotency.h"
#include "db/sagas.h"

namespace fp::app {

StoreCounters StoreStats::Counters() const {
  StoreCounters c{ds_.durable_commits(), ds_.log_syncs(),          ds_.sqlite_commits(),
                  ds_.checkpoints(),     ds_.log_restarts(),       ds_.log_limit_restarts(),
                  ds_.round_trips(),     ds_.transaction_retries()};
  c.refused_writes = ds_.refused_writes();
  c.failed_writes = ds_.failed_writes();
  c.read_transactions = ds_.read_transactions();
  db::EngineStats engine = ds_.engine_stats();
  c.queued_transactions = engine.queued_transactions;
  std::copy(engine.batch_sizes.begin(), engine.batch_sizes.end(), c.batch_sizes.begin());
  c.batched_writes = engine.batched_writes;
  c.connections_open = engine.open_readers;
  c.connection_waiters = engine.waiting_readers;
  return c;
}

Result<HistoryCounters> StoreStats::History() const {
  db::SagaHistoryStats sagas = FP_TRY(db::SagaHistory(ds_));
  int64_t keys_pruned = FP_TRY(db::IdempotencyKeysPruned(ds_));
  return HistoryCounters{sagas.saga_rows, sagas.sagas_pruned, keys_pruned,
                         ds_.database_file_bytes(), ds_.log_file_bytes()};
}

}  // namespace fp::app
