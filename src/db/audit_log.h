#pragma once

// The audit log's table (model/audit_log.h). Entries are written with the effect they describe
// (db/request_effect.h): completed in the effect's own transaction, or, for a request a saga
// carries, in progress with the saga's creation and completed in the transaction that brings
// the saga to rest. Only completed entries are listed, in the order they completed, so a time
// range fully in the past always lists the same entries.

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "db/datastore.h"
#include "model/audit_log.h"
#include "saga/store.h"

namespace fp::db {

// Inserts `entry` as it is (completed, or in progress when time_completed is 0).
Status AuditInsertIn(Tx& tx, const model::AuditEntry& entry);
// Completes the in-progress entry `entry.id` with entry's result and time_completed, unless
// it is complete already or a saga whose end completes it carries it, or inserts it if it is
// absent. For a request whose effect did not complete its entry.
Status AuditFinishIn(Tx& tx, const model::AuditEntry& entry);
// Makes saga `saga_id` the one carrying the in-progress entry `entry_id`, whose end completes
// it if `completes`.
Status AuditLinkSagaIn(Tx& tx, const Uuid& entry_id, const Uuid& saga_id, bool completes);
// In the transaction that brings saga `saga_id` to `state` (done, unwound or stuck) with
// `result` (its output, or its error as JSON): completes the entry the saga carries, if any.
Status AuditCompleteForSagaIn(Tx& tx, const Uuid& saga_id, saga::SagaState state,
                              const std::optional<std::string>& result);

// One page of completed entries (model::AuditPageRequest).
Result<std::vector<model::AuditEntry>> AuditList(Datastore& ds,
                                                 const model::AuditPageRequest& page);

// Completes, as an error that says so, at most `limit` entries left in progress by a server
// that stopped:
// those started before `started_before` that no unfinished saga carries (their saga came to
// rest without completing them, was pruned, or was never created: the server stopped between
// the request's writes); with `server_id`, only that server's. Returns how many it completed.
Result<int64_t> AuditCompleteCutShort(Datastore& ds, Timestamp started_before, int64_t limit,
                                      const std::optional<std::string>& server_id = std::nullopt);

// Deletes, oldest first, at most `limit` completed entries that completed more than
// `retention_us` ago, and adds their number to counter 'audit_entries_pruned'. Returns how many.
Result<int64_t> AuditPrune(Datastore& ds, int64_t retention_us, int64_t limit);

}  // namespace fp::db
