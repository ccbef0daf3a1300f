#pragma once

// The audit log as the API uses it: a record for each mutating request (and each failed
// authentication) made when it arrives and finished before its answer leaves, and the list
// operators read (GET /v1/system/audit-log). What a crash at each instant leaves behind is
// db/request_effect.h's.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/actor.h"
#include "app/request.h"
#include "common/error.h"
#include "model/audit_log.h"

namespace fp::db {
class Datastore;
}  // namespace fp::db

namespace fp::app {

// Thread-safe.
class Audit {
 public:
  // `server_id`: this server's saga coordinator id, recorded in each entry it begins.
  // `request_deadline` (microseconds; 0: none): how long after its arrival a request's first
  // effect may still commit (db::RequestEffect's deadline).
  explicit Audit(db::Datastore& ds, std::string server_id = {}, Timestamp request_deadline = 0)
      : ds_(ds), server_id_(std::move(server_id)), request_deadline_(request_deadline) {}

  // The datastore's clock: when a request arrived, as its entry records it.
  Timestamp Now() const;

  // The record of a request that arrived now, by `actor` (null: no one authenticated), with
  // its Idempotency-Key if it sent one.
  std::unique_ptr<RequestRecord> Begin(const Actor* actor, const RequestFacts& facts,
                                       std::optional<RequestKey> key);
  // After the request, before `answer` leaves: completes its entry unless its effect did, and
  // with `keep_answer` stores the answer under its key, in one write (nothing to write: no
  // write). Errors: the datastore's.
  Status Finish(RequestRecord& record, const KeyAnswer& answer, bool keep_answer);

  // Completed entries, for a fleet admin (Forbidden otherwise).
  Result<std::vector<model::AuditEntry>> List(const Actor& actor,
                                              const model::AuditPageRequest& page);

  // Completes the entries a stopped server left in progress (db::AuditCompleteCutShort) that
  // started before `started_before`; `own` only: those of an earlier run of this server (the
  // same server id). Returns how many.
  Result<int64_t> CompleteCutShort(Timestamp started_before, bool own);

 private:
  db::Datastore& ds_;
  const std::string server_id_;
  const Timestamp request_deadline_;
};

}  // namespace fp::app
