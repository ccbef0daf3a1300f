#pragma once

// Idempotency keys for mutating requests (product.md difference 13).

#include <optional>
#include <string>

#include "db/datastore.h"

namespace fp::db {

struct IdempotencyClaim {
  enum class Kind {
    kNew,         // first use: the caller runs the request, then Finish or Abandon
    kReplay,      // done before with the same request: answer `status`/`body` again
    kMismatch,    // the key was used with a different request
    kInProgress,  // the first request with this key is still running
  };
  Kind kind = Kind::kNew;
  int status = 0;
  std::string body;
};

// Claims `key` for the token's request whose hash is `request_sha256`. A claim left pending
// longer than `abandon_after_us` (its server died) is taken over.
Result<IdempotencyClaim> IdempotencyBegin(Datastore& ds, const Uuid& token_id,
                                          const std::string& key, const std::string& request_sha256,
                                          int64_t abandon_after_us);
// Records the response to replay.
Status IdempotencyFinish(Datastore& ds, const Uuid& token_id, const std::string& key, int status,
                         const std::string& body);
// Forgets a claim whose request failed in a way worth retrying (5xx).
Status IdempotencyAbandon(Datastore& ds, const Uuid& token_id, const std::string& key);

// --- Bounded history ---

// Deletes, oldest first, at most `limit` keys claimed more than `retention_us` before the
// transaction's time (a retry after that is a new request), in one write transaction, and adds
// the number to counter 'idempotency_keys_pruned'. Returns how many it deleted: fewer than
// `limit` means none is left to prune. Thread-safe.
Result<int64_t> IdempotencyPrune(Datastore& ds, int64_t retention_us, int64_t limit);
// Keys deleted by IdempotencyPrune since the database was created.
Result<int64_t> IdempotencyKeysPruned(Datastore& ds);

}  // namespace fp::db
