#include "app/token_cache.h"

#include "common/sha256.h"
#include "db/datastore.h"
#include "db/tokens.h"

namespace fp::app {

namespace {
constexpr size_t kTokenCacheMax = 10000;  // past this many tokens in use, start over
constexpr Timestamp kTtlMicros = std::chrono::microseconds(TokenCache::kTtl).count();
}  // namespace

Result<std::optional<model::Token>> TokenCache::Authenticate(const std::string& secret) {
  std::string hash = Sha256Hex(secret);
  const Timestamp now = clock_.Now();
  uint64_t generation = 0;
  {
    MutexLock lock(mu_);
    if (auto it = tokens_.find(hash); it != tokens_.end()) {
      if (it->second.expires > now) return std::optional<model::Token>(it->second.token);
      tokens_.erase(it);
    }
    generation = generation_;
  }
  auto found = FP_TRY(db::TokenAuthenticate(ds_, secret));
  ds_.SyncPoint("token_authenticate:read");
  if (found) {
    MutexLock lock(mu_);
    if (generation_ == generation) {
      if (tokens_.size() >= kTokenCacheMax) tokens_.clear();
      tokens_.insert_or_assign(std::move(hash), CachedToken{*found, now + kTtlMicros});
    }
  }
  return found;
}

void TokenCache::Invalidate() {
  MutexLock lock(mu_);
  ++generation_;
  tokens_.clear();
}

}  // namespace fp::app
