#pragma once

// Local users and their console sessions, in Oxide's shape (../shared/spec/product.md "People
// and sessions"): a silo admin creates users with a password and a role; a user logs in
// (POST /v1/login/{silo}/local) and gets a session whose token travels in a cookie; the API
// accepts that cookie like a bearer token. Thread-safe.

#include <chrono>
#include <condition_variable>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "app/actor.h"
#include "app/request.h"
#include "common/error.h"
#include "common/mutex.h"
#include "common/name.h"
#include "common/time.h"
#include "model/auth.h"

namespace fp::db {
class Datastore;
}  // namespace fp::db

namespace fp::app {

struct SessionPolicy {
  // A session unused this long ends; so does one this old, however used.
  std::chrono::seconds idle_timeout{std::chrono::hours(1)};
  std::chrono::seconds absolute_timeout{std::chrono::hours(24)};
};

// Repeated failed logins, counted per source (a client address; an IPv6 client's /64) and per
// (user name, source): a key with more than a few failures must wait, twice as long after each
// further one (up to 15 minutes), and is refused meanwhile (429 with Retry-After). Counting per
// (user, source) slows a guesser without locking the user out from anywhere else. An attempt
// counts as a failure from the moment it is admitted, so that a burst of parallel guesses gets
// no more tries than a sequence. In memory: each server counts its own.
class LoginThrottle {
 public:
  // Admits a login from `source` as `user` now (counted as failed until Succeeded says
  // otherwise), or says how many seconds to wait first.
  std::optional<int64_t> Admit(const std::string& source, const std::string& user, Timestamp now);
  // An admitted login succeeded: it does not count, and clears the (user, source) count.
  void Succeeded(const std::string& source, const std::string& user);

 private:
  struct Count {
    int failures = 0;
    Timestamp last = 0;
  };
  std::optional<int64_t> WaitFor(const std::map<std::string, Count>& counts, const std::string& key,
                                 int free, Timestamp now) const;
  void Forget(Timestamp now) FP_REQUIRES(mu_);  // counts idle for the whole window, beyond a bound

  Mutex mu_;
  std::map<std::string, Count> by_source_ FP_GUARDED_BY(mu_);
  std::map<std::string, Count> by_user_source_ FP_GUARDED_BY(mu_);
};

// Bounds the password hashes computed at once (each takes 19 MiB and a core for tens of
// milliseconds): logins beyond it are answered 503 at once, administrators' changes wait.
class PasswordWork {
 public:
  explicit PasswordWork(int slots) : free_(slots) {}
  bool TryAcquire();
  void Acquire();
  void Release();

 private:
  Mutex mu_;
  std::condition_variable freed_;
  int free_ FP_GUARDED_BY(mu_);
};

// A session just made: its token goes to the client (in a cookie) and is never stored.
struct NewSession {
  Uuid id;
  std::string token;
  std::chrono::seconds max_age;
};

class Users {
 public:
  Users(db::Datastore& ds, SessionPolicy policy) : ds_(ds), policy_(policy) {}

  // Silo admins of that silo and fleet admins: a local user named `name` with `role` (a
  // fleet admin role only from a fleet admin) and, if given, a password (CheckNewPassword's
  // rules). ObjectAlreadyExists if the silo has a user of that name.
  Result<model::SiloUser> Create(const Request<model::SiloUser>& rq, const NameOrId& silo,
                                 const std::string& name, model::Role role,
                                 const std::optional<std::string>& password);
  // Sets or (nullopt) disallows the password; every session of the user ends. A fleet admin's
  // password (and, for Delete, the user) only a fleet admin may change.
  Status SetPassword(const RequestContext& rq, const NameOrId& silo, const Uuid& user,
                     const std::optional<std::string>& password);
  Status Delete(const RequestContext& rq, const NameOrId& silo, const Uuid& user);
  // The actor's silo's users (any role may list them), by id.
  Result<std::vector<model::SiloUser>> List(const Actor& actor, const std::optional<Uuid>& after,
                                            int64_t limit);
  // The signed-in user (GET /v1/me) and its silo's name: NotFound for an actor that is a
  // token, not a user.
  struct Me {
    model::SiloUser user;
    std::string silo_name;
  };
  Result<Me> CurrentUser(const Actor& actor);

  // POST /v1/login/{silo}/local from `source`. A wrong name or password gets the same 401
  // ("credentials invalid") in about the same time (a missing user costs a password check
  // too); too many failures get 429 (LoginThrottle). `rq` carries the login's audit entry,
  // which commits with the session.
  Result<NewSession> Login(const RequestContext& rq, const Name& silo, const std::string& name,
                           const std::string& password, const std::string& source);
  // POST /v1/login/token (floatplane's extension): the API token the actor authenticated with
  // traded for a session of its own, so that a browser holds only an HttpOnly cookie.
  // Unauthenticated for an actor that is a user.
  Result<NewSession> LoginWithToken(const RequestContext& rq);
  // POST /v1/logout: the session of `token` ends (nothing to end is fine).
  Status Logout(const RequestContext& rq, const std::string& token);

  // The actor of a session cookie's token; Unauthenticated when it is unknown, its user or
  // silo is gone, or it expired (then it is deleted).
  Result<Actor> Authenticate(const std::string& token);

 private:
  Result<Uuid> SiloForAdmin(const Actor& actor, const NameOrId& silo);
  // The silo of a user the actor may manage (SiloForAdmin, and a fleet admin's only a fleet
  // admin).
  Result<Uuid> SiloOfManagedUser(const Actor& actor, const NameOrId& silo, const Uuid& user);
  Result<std::string> Hash(const std::string& password);

  db::Datastore& ds_;
  const SessionPolicy policy_;
  LoginThrottle throttle_;
  PasswordWork password_work_{4};
};

}  // namespace fp::app
