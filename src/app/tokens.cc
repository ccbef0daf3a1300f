#include "app/tokens.h"

#include <fmt/format.h>

#include "db/request_effect.h"
#include "db/silos.h"
#include "db/tokens.h"

namespace fp::app {

namespace {

constexpr std::string_view kDevSilo = "default";

std::string NewSecret(Random& random) {
  uint8_t bytes[32];
  random.Fill(bytes, sizeof bytes);
  std::string s = "fpt_";
  for (uint8_t b : bytes) s += fmt::format("{:02x}", b);
  return s;
}

}  // namespace

Result<Actor> Tokens::Authenticate(const std::string& secret) {
  auto token = FP_TRY(cache_.Authenticate(secret));
  if (!token) return Fail(Error::Unauthenticated("credentials missing or invalid"));
  return Actor{token->id, token->silo_id, token->role};
}

Result<std::optional<std::string>> Tokens::BootstrapDev() {
  auto name = FP_TRY(Name::Parse(kDevSilo));
  auto existing = db::SiloLookup(ds_, NameOrId(name));
  if (existing) return std::optional<std::string>();
  if (existing.error().kind() != ErrorKind::kNotFound) return Fail(existing.error());
  model::SiloCreate silo;
  silo.id = ds_.random().NewUuid();
  silo.name = std::string(kDevSilo);
  silo.description = "default silo created by the dev server";
  auto created = db::SiloCreate(ds_, silo);
  if (!created) {
    // Another server on the same database bootstrapped it since the lookup: its token is it.
    if (created.error().kind() == ErrorKind::kObjectAlreadyExists) {
      return std::optional<std::string>();
    }
    return Fail(created.error());
  }
  return std::optional<std::string>(FP_TRY(MintFleetAdminToken("dev-admin")));
}

Result<std::string> Tokens::MintFleetAdminToken(const std::string& name) {
  model::Silo silo = FP_TRY(db::SiloLookup(ds_, NameOrId(FP_TRY(Name::Parse(kDevSilo)))));
  std::string secret = NewSecret(ds_.random());
  FP_TRY(db::TokenCreate(ds_, ds_.random().NewUuid(), silo.id, model::Role::kFleetAdmin, name,
                         secret));
  return secret;
}

Result<IssuedToken> Tokens::Create(const Request<model::Token>& rq, const NameOrId& silo,
                                   model::Role role, const std::string& name) {
  const Actor& actor = rq.actor;
  FP_CHECK_OK(RequireFleetAdmin(actor));
  model::Silo s = FP_TRY(db::SiloLookup(ds_, silo));
  std::string secret = NewSecret(ds_.random());
  model::Token t = FP_TRY(db::TokenCreate(ds_, ds_.random().NewUuid(), s.id, role, name, secret,
                                          db::EffectOf<model::Token>(rq)));
  return IssuedToken{t, secret};
}

Status Tokens::Revoke(const RequestContext& rq, const Uuid& id) {
  const Actor& actor = rq.actor;
  FP_CHECK_OK(RequireFleetAdmin(actor));
  Status revoked = db::TokenRevoke(ds_, id, db::EffectOfNoContent(rq));
  cache_.Invalidate();  // after the commit: see TokenCache
  return revoked;
}

Result<std::vector<model::TokenListing>> Tokens::List(const Actor& actor,
                                                      const std::optional<Uuid>& after,
                                                      int64_t limit) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  return db::TokenList(ds_, after, limit);
}

Result<Tokens::Me> Tokens::CurrentUser(const Actor& actor) {
  Me me{FP_TRY(db::TokenGet(ds_, actor.token_id)), ""};
  me.silo_name = FP_TRY(db::SiloLookup(ds_, NameOrId(actor.silo_id))).name;
  return me;
}

}  // namespace fp::app
