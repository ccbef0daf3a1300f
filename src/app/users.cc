#include "app/users.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "app/passwords.h"
#include "db/datastore.h"
#include "db/request_effect.h"
#include "db/silos.h"
#include "db/users.h"

namespace fp::app {

namespace {

constexpr int kFreePerUserAndSource = 5;
constexpr int kFreePerSource = 20;
constexpr int64_t kMaxWaitSeconds = 15 * 60;
constexpr Timestamp kSecond = 1'000'000;
// A session's last use is written at most this often (the idle timeout is counted in hours).
constexpr Timestamp kTouchEvery = 60 * kSecond;

// One message for every way a login can be wrong: it must not tell which.
Error InvalidCredentials() {
  return Error::Unauthenticated("credentials invalid: wrong user name or password");
}

std::string NewToken(Random& random) {
  std::array<unsigned char, 32> bytes{};
  random.Fill(bytes.data(), bytes.size());
  std::string token;
  for (unsigned char b : bytes) token += fmt::format("{:02x}", b);
  return token;
}

}  // namespace

// ---- LoginThrottle ----

std::optional<int64_t> LoginThrottle::WaitFor(const std::map<std::string, Count>& counts,
                                              const std::string& key, int free,
                                              Timestamp now) const {
  auto it = counts.find(key);
  if (it == counts.end() || it->second.failures < free) return std::nullopt;
  int64_t wait_s =
      std::min<int64_t>(kMaxWaitSeconds, int64_t{1} << std::min(it->second.failures - free, 20));
  Timestamp until = it->second.last + wait_s * kSecond;
  if (now >= until) return std::nullopt;
  return std::max<int64_t>(1, (until - now + kSecond - 1) / kSecond);
}

std::optional<int64_t> LoginThrottle::Admit(const std::string& source, const std::string& user,
                                            Timestamp now) {
  MutexLock lock(mu_);
  const std::string user_key = user + "\n" + source;
  auto by_source = WaitFor(by_source_, source, kFreePerSource, now);
  auto by_user = WaitFor(by_user_source_, user_key, kFreePerUserAndSource, now);
  if (by_source || by_user) return std::max(by_source.value_or(0), by_user.value_or(0));
  Forget(now);
  for (auto [counts, key] :
       {std::pair{&by_source_, &source}, std::pair{&by_user_source_, &user_key}}) {
    Count& c = (*counts)[*key];
    // A quiet window forgives what came before.
    if (now - c.last > kMaxWaitSeconds * kSecond) c.failures = 0;
    ++c.failures;
    c.last = now;
  }
  return std::nullopt;
}

void LoginThrottle::Succeeded(const std::string& source, const std::string& user) {
  MutexLock lock(mu_);
  by_user_source_.erase(user + "\n" + source);
  if (auto it = by_source_.find(source); it != by_source_.end() && it->second.failures > 0) {
    --it->second.failures;
  }
}

void LoginThrottle::Forget(Timestamp now) {
  constexpr size_t kBound = 100'000;
  for (auto* counts : {&by_source_, &by_user_source_}) {
    if (counts->size() < kBound) continue;
    std::erase_if(*counts, [&](const auto& entry) {
      return now - entry.second.last > kMaxWaitSeconds * kSecond;
    });
  }
}

// ---- PasswordWork ----

bool PasswordWork::TryAcquire() {
  MutexLock lock(mu_);
  if (free_ == 0) return false;
  --free_;
  return true;
}

void PasswordWork::Acquire() {
  MutexLock lock(mu_);
  lock.Wait(freed_, [&]() FP_REQUIRES(mu_) { return free_ > 0; });
  --free_;
}

void PasswordWork::Release() {
  {
    MutexLock lock(mu_);
    ++free_;
  }
  freed_.notify_one();
}

// ---- Users ----

Result<std::string> Users::Hash(const std::string& password) {
  password_work_.Acquire();
  auto hash = HashPassword(password, ds_.random());
  password_work_.Release();
  return hash;
}

Result<Uuid> Users::SiloOfManagedUser(const Actor& actor, const NameOrId& silo, const Uuid& user) {
  const Uuid silo_id = FP_TRY(SiloForAdmin(actor, silo));
  model::SiloUser target = FP_TRY(db::UserGet(ds_, silo_id, user));
  // Else a silo admin could set a fleet admin's password and sign in as one.
  if (target.role == model::Role::kFleetAdmin && !actor.is_fleet_admin()) {
    return Fail(Error::Forbidden());
  }
  return silo_id;
}

Result<Uuid> Users::SiloForAdmin(const Actor& actor, const NameOrId& silo) {
  model::Silo found = FP_TRY(db::SiloLookup(ds_, silo));
  const bool admin = actor.is_fleet_admin() ||
                     (actor.role == model::Role::kSiloAdmin && actor.silo_id == found.id);
  if (!admin) {
    // Another silo's users are none of this actor's business: as if it did not exist.
    if (actor.silo_id != found.id) return Fail(Error::NotFoundByName("silo", silo.ToString()));
    return Fail(Error::Forbidden());
  }
  return found.id;
}

Result<model::SiloUser> Users::Create(const Request<model::SiloUser>& rq, const NameOrId& silo,
                                      const std::string& name, model::Role role,
                                      const std::optional<std::string>& password) {
  const Uuid silo_id = FP_TRY(SiloForAdmin(rq.actor, silo));
  if (role == model::Role::kFleetAdmin && !rq.actor.is_fleet_admin()) {
    return Fail(Error::Forbidden());
  }
  std::optional<std::string> hash;
  if (password) {
    FP_CHECK_OK(CheckNewPassword(*password, "password.value"));
    hash = FP_TRY(Hash(*password));
  }
  return db::UserCreate(ds_, ds_.random().NewUuid(), silo_id, name, role, hash,
                        db::EffectOf<model::SiloUser>(rq));
}

Status Users::SetPassword(const RequestContext& rq, const NameOrId& silo, const Uuid& user,
                          const std::optional<std::string>& password) {
  const Uuid silo_id = FP_TRY(SiloOfManagedUser(rq.actor, silo, user));
  std::optional<std::string> hash;
  if (password) {
    FP_CHECK_OK(CheckNewPassword(*password, "value"));
    hash = FP_TRY(Hash(*password));
  }
  return db::UserSetPassword(ds_, silo_id, user, hash, db::EffectOfNoContent(rq));
}

Status Users::Delete(const RequestContext& rq, const NameOrId& silo, const Uuid& user) {
  const Uuid silo_id = FP_TRY(SiloOfManagedUser(rq.actor, silo, user));
  return db::UserDelete(ds_, silo_id, user, db::EffectOfNoContent(rq));
}

Result<std::vector<model::SiloUser>> Users::List(const Actor& actor,
                                                 const std::optional<Uuid>& after, int64_t limit) {
  return db::UserList(ds_, actor.silo_id, after, limit);
}

Result<Users::Me> Users::CurrentUser(const Actor& actor) {
  if (!actor.user_id) return Fail(Error::NotFound("the actor is an API token, not a user"));
  model::SiloUser user = FP_TRY(db::UserGet(ds_, actor.silo_id, *actor.user_id));
  model::Silo silo = FP_TRY(db::SiloLookup(ds_, NameOrId(actor.silo_id)));
  return Me{std::move(user), silo.name};
}

Result<NewSession> Users::Login(const RequestContext& rq, const Name& silo, const std::string& name,
                                const std::string& password, const std::string& source) {
  const Timestamp now = ds_.clock().Now();
  const std::string who = silo.str() + "/" + name;
  if (auto wait = throttle_.Admit(source, who, now)) {
    return Fail(Error::TooManyRequests(
        fmt::format("too many failed logins from {}; try again in {} s", source, *wait),
        static_cast<int>(*wait)));
  }
  // No password is that long: refused before anything is looked up, so that it takes the
  // same time whoever the user.
  if (password.size() > kMaxPasswordBytes) return Fail(InvalidCredentials());
  if (!password_work_.TryAcquire()) {
    return Fail(
        Error::Unavailable("the server is checking as many passwords as it can; retry "
                           "in a moment"));
  }
  std::optional<db::LoginCandidate> candidate;
  bool matches = false;
  Status looked_up = [&]() -> Status {
    if (auto found = db::SiloLookup(ds_, NameOrId(silo)); found) {
      candidate = FP_TRY(db::UserForLogin(ds_, found->id, name));
    } else if (found.error().kind() != ErrorKind::kNotFound) {
      return Fail(found.error());
    }
    matches = candidate && candidate->password_hash &&
              PasswordMatches(password, *candidate->password_hash);
    if (!candidate || !candidate->password_hash) SpendAsLongAsAPasswordCheck(password);
    return Ok();
  }();
  password_work_.Release();
  FP_CHECK_OK(looked_up);
  if (!matches) return Fail(InvalidCredentials());
  throttle_.Succeeded(source, who);
  NewSession session{.id = ds_.random().NewUuid(),
                     .token = NewToken(ds_.random()),
                     .max_age = policy_.absolute_timeout};
  FP_CHECK_OK(db::SessionCreate(ds_, session.id, session.token, candidate->user.id, std::nullopt,
                                db::EffectOfNoContent(rq)));
  return session;
}

Result<NewSession> Users::LoginWithToken(const RequestContext& rq) {
  if (rq.actor.by_session) {
    return Fail(Error::Unauthenticated(
        "an API token is traded for a session, not a session: send the token as a bearer "
        "token"));
  }
  NewSession session{.id = ds_.random().NewUuid(),
                     .token = NewToken(ds_.random()),
                     .max_age = policy_.absolute_timeout};
  FP_CHECK_OK(db::SessionCreate(ds_, session.id, session.token, std::nullopt, rq.actor.token_id,
                                db::EffectOfNoContent(rq)));
  return session;
}

Status Users::Logout(const RequestContext& rq, const std::string& token) {
  auto session = FP_TRY(db::SessionLookup(ds_, token));
  if (!session) return Ok();
  return db::SessionDelete(ds_, session->id, db::EffectOfNoContent(rq));
}

Result<Actor> Users::Authenticate(const std::string& token) {
  auto session = FP_TRY(db::SessionLookup(ds_, token));
  if (!session) return Fail(Error::Unauthenticated("session invalid: log in again"));
  const Timestamp now = ds_.clock().Now();
  const Timestamp idle =
      std::chrono::duration_cast<std::chrono::microseconds>(policy_.idle_timeout).count();
  const Timestamp absolute =
      std::chrono::duration_cast<std::chrono::microseconds>(policy_.absolute_timeout).count();
  if (now - session->time_last_used > idle || now - session->time_created > absolute) {
    (void)db::SessionDelete(ds_, session->id);
    return Fail(Error::Unauthenticated("session expired: log in again"));
  }
  // Written at most once a minute (or a quarter of the idle timeout, if shorter).
  if (now - session->time_last_used > std::min(kTouchEvery, idle / 4)) {
    FP_CHECK_OK(db::SessionTouch(ds_, session->id));
  }
  if (session->api_token) {
    return Actor{.token_id = session->api_token->id,
                 .silo_id = session->api_token->silo_id,
                 .role = session->api_token->role,
                 .by_session = true};
  }
  return Actor{.token_id = session->id,
               .silo_id = session->user->silo_id,
               .role = session->user->role,
               .user_id = session->user->id,
               .by_session = true};
}

}  // namespace fp::app
