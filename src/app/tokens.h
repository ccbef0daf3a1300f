#pragma once

#include <optional>
#include <string>
#include <vector>

#include "app/actor.h"
#include "app/request.h"
#include "app/token_cache.h"
#include "common/error.h"
#include "common/name.h"
#include "model/auth.h"

namespace fp::db {
class Datastore;
}  // namespace fp::db

namespace fp::app {

// A newly minted token: the secret is shown once and stored only as a hash.
struct IssuedToken {
  model::Token token;
  std::string secret;
};

// API tokens: authentication of a request's bearer secret, the dev server's bootstrap, and
// the fleet admin's token operations. Thread-safe.
//
// Errors: Forbidden (403) for an operation the role does not allow; the datastore's otherwise.
class Tokens {
 public:
  // `cache` is shared with Silos (a silo delete revokes its tokens); both must outlive this.
  Tokens(db::Datastore& ds, TokenCache& cache) : ds_(ds), cache_(cache) {}

  // The actor a bearer secret stands for. Unauthenticated (401) when the secret matches no
  // live token of a live silo.
  Result<Actor> Authenticate(const std::string& secret);

  // Creates the silo `default` and a fleet-admin token in it if no silo named `default`
  // exists yet. Returns the token's secret when one was minted: only by the caller whose
  // create of the silo committed, so servers bootstrapping one database at the same time mint
  // one token between them. Idempotent.
  Result<std::optional<std::string>> BootstrapDev();
  // Mints another fleet-admin token in silo `default` (used when the token file was lost).
  Result<std::string> MintFleetAdminToken(const std::string& name);

  // Fleet admin only. NotFound if the silo does not exist.
  Result<IssuedToken> Create(const Request<model::Token>& rq, const NameOrId& silo,
                             model::Role role, const std::string& name);
  // Fleet admin only. Once it returns, no request authenticates with the token (in this
  // process; others within TokenCache::kTtl).
  Status Revoke(const RequestContext& rq, const Uuid& id);
  // Fleet admin only: the live tokens by id, after `after`, at most `limit`.
  Result<std::vector<model::TokenListing>> List(const Actor& actor,
                                                const std::optional<Uuid>& after, int64_t limit);

  // Who the actor is (GET /v1/me): its token (as the user: floatplane has no users, a token
  // is one) and its silo.
  struct Me {
    model::TokenListing token;
    std::string silo_name;
  };
  Result<Me> CurrentUser(const Actor& actor);

 private:
  db::Datastore& ds_;
  TokenCache& cache_;
};

}  // namespace fp::app
