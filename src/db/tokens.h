#pragma once

// API tokens (tokens.cc). The datastore keeps only the SHA-256 of a token's secret.

#include <optional>
#include <string>
#include <vector>

#include "db/datastore.h"
#include "model/auth.h"

namespace fp::db {

// Stores the SHA-256 of `secret`, never the secret. NotFound unless the silo is live.
Result<model::Token> TokenCreate(Datastore& ds, const Uuid& id, const Uuid& silo_id,
                                 model::Role role, const std::string& name,
                                 const std::string& secret,
                                 const Effect<model::Token>& effect = {});
// NotFound-free: std::nullopt when no live token of a live silo has that secret. One read
// transaction each time (app/token_cache.h answers most requests without one).
Result<std::optional<model::Token>> TokenAuthenticate(Datastore& ds, const std::string& secret);
// NotFound unless the token exists and is not revoked yet.
Status TokenRevoke(Datastore& ds, const Uuid& id, const Effect<void>& effect = {});

// The live tokens (not revoked, of live silos), by id, after `after` (exclusive), at most
// `limit`. Secrets are not kept, so none is listed.
Result<std::vector<model::TokenListing>> TokenList(Datastore& ds, const std::optional<Uuid>& after,
                                                   int64_t limit);
// The token's own row (live or not); NotFound when there is none.
Result<model::TokenListing> TokenGet(Datastore& ds, const Uuid& id);

}  // namespace fp::db
