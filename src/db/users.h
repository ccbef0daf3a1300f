#pragma once

// Local users of a silo and their console sessions (users.cc). A password is kept only as its
// Argon2id hash (app/passwords.h), a session only as the SHA-256 of its token.

#include <optional>
#include <string>
#include <vector>

#include "db/datastore.h"
#include "model/auth.h"

namespace fp::db {

using model::SiloUser;

// NotFound unless the silo is live; ObjectAlreadyExists if a live user of the silo has the name.
Result<SiloUser> UserCreate(Datastore& ds, const Uuid& id, const Uuid& silo_id,
                            const std::string& name, model::Role role,
                            const std::optional<std::string>& password_hash,
                            const Effect<SiloUser>& effect = {});
// Sets (or, with nullopt, disallows) the password, and ends every session of the user.
// NotFound unless the user is a live user of the silo.
Status UserSetPassword(Datastore& ds, const Uuid& silo_id, const Uuid& id,
                       const std::optional<std::string>& password_hash,
                       const Effect<void>& effect = {});
// Deletes the user and ends its sessions. NotFound unless a live user of the silo.
Status UserDelete(Datastore& ds, const Uuid& silo_id, const Uuid& id,
                  const Effect<void>& effect = {});
// NotFound unless a live user of the silo (of any silo when `silo_id` is nullopt).
Result<SiloUser> UserGet(Datastore& ds, const std::optional<Uuid>& silo_id, const Uuid& id);
// The silo's live users by id, after `after`, at most `limit`.
Result<std::vector<SiloUser>> UserList(Datastore& ds, const Uuid& silo_id,
                                       const std::optional<Uuid>& after, int64_t limit);

// What a login checks: the live user of a live silo with that name, and its password hash
// (nullopt: login disallowed). nullopt when there is no such user.
struct LoginCandidate {
  SiloUser user;
  std::optional<std::string> password_hash;
};
Result<std::optional<LoginCandidate>> UserForLogin(Datastore& ds, const Uuid& silo_id,
                                                   const std::string& name);

// A console session as authentication sees it: a user's, or an API token's (traded for a
// cookie at login).
struct Session {
  Uuid id;
  std::optional<SiloUser> user;
  std::optional<model::Token> api_token;
  Timestamp time_created = 0;
  Timestamp time_last_used = 0;
};

// Stores a new session of a user (or of an API token) under the SHA-256 of `token`; `effect`
// (the login's) commits with it.
Status SessionCreate(Datastore& ds, const Uuid& id, const std::string& token,
                     const std::optional<Uuid>& user_id, const std::optional<Uuid>& api_token_id,
                     const Effect<void>& effect = {});
// The session whose token this is, of a live user (or unrevoked token) of a live silo;
// nullopt otherwise.
Result<std::optional<Session>> SessionLookup(Datastore& ds, const std::string& token);
// Records a use of the session now (the idle timeout counts from the last one).
Status SessionTouch(Datastore& ds, const Uuid& id);
// Ends the session (logout, expiry). Ending one that is gone is fine.
Status SessionDelete(Datastore& ds, const Uuid& id, const Effect<void>& effect = {});

}  // namespace fp::db
