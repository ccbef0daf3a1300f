#pragma once

// Authentication of API tokens, answered from a cache of recent positive answers when it can
// (a read transaction per request was a tenth of the server's work).

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

#include "common/error.h"
#include "common/mutex.h"
#include "common/time.h"
#include "model/auth.h"

namespace fp::db {
class Datastore;
}  // namespace fp::db

namespace fp::app {

// Thread-safe. A revocation or silo delete made through this process must call Invalidate
// once it has committed: from then on no answer given says the token is live (an answer in
// flight when it committed may). One made by another process is seen within kTtl of the
// injected clock's time (the server's SystemClock is wall time: a clock stepped back extends
// it by the step).
class TokenCache {
 public:
  static constexpr std::chrono::milliseconds kTtl{1000};

  // `clock` must outlive the cache; its time decides when a cached answer expires.
  TokenCache(db::Datastore& ds, const Clock& clock) : ds_(ds), clock_(clock) {}

  // The live token of a live silo with this secret; std::nullopt when there is none (such
  // answers are not cached). Errors: the datastore's.
  Result<std::optional<model::Token>> Authenticate(const std::string& secret);
  // Forgets every cached answer, and keeps out those read before this call.
  void Invalidate();

 private:
  struct CachedToken {
    model::Token token;
    Timestamp expires;
  };
  db::Datastore& ds_;
  const Clock& clock_;
  // Keyed by the secret's hash. A read that began before an invalidation (generation bump)
  // does not insert what it read.
  Mutex mu_;
  uint64_t generation_ FP_GUARDED_BY(mu_) = 0;
  std::unordered_map<std::string, CachedToken> tokens_ FP_GUARDED_BY(mu_);
};

}  // namespace fp::app
