#include "app/audit.h"

#include "db/audit_log.h"
#include "db/datastore.h"
#include "db/request_effect.h"

namespace fp::app {

namespace {
// Oxide's limits on what an entry keeps of the request.
constexpr size_t kMaxUri = 512;
constexpr size_t kMaxUserAgent = 256;
}  // namespace

RequestRecord::RequestRecord(std::unique_ptr<db::RequestEffect> effect)
    : effect_(std::move(effect)) {}

RequestRecord::~RequestRecord() = default;

RequestRecord::Outcome RequestRecord::outcome() const {
  switch (effect_->outcome()) {
    case db::RequestEffect::Outcome::kNone:
      return Outcome::kNone;
    case db::RequestEffect::Outcome::kAnswered:
      return Outcome::kAnswered;
    case db::RequestEffect::Outcome::kSaga:
      return Outcome::kSaga;
    case db::RequestEffect::Outcome::kTaken:
      return Outcome::kTaken;
  }
  return Outcome::kNone;
}

KeyAnswer RequestRecord::answer() const {
  return KeyAnswer{effect_->answer().status, effect_->answer().body};
}

void RequestRecord::AnswerSagaWith(int status) { effect_->set_saga_success_status(status); }

void RequestRecord::ReplayFromKey() { effect_->ForgetKey(); }

Timestamp Audit::Now() const { return ds_.clock().Now(); }

std::unique_ptr<RequestRecord> Audit::Begin(const Actor* actor, const RequestFacts& facts,
                                            std::optional<RequestKey> key) {
  model::AuditEntry entry;
  entry.id = ds_.random().NewTimeOrderedUuid(ds_.clock().Now());
  entry.time_started = facts.time_started;
  entry.request_id = facts.request_id;
  entry.request_uri = facts.request_uri.substr(0, kMaxUri);
  entry.operation_id = facts.operation_id;
  entry.source_ip = facts.source_ip;
  if (!server_id_.empty()) entry.server_id = server_id_;
  if (facts.user_agent) entry.user_agent = facts.user_agent->substr(0, kMaxUserAgent);
  if (actor != nullptr) {
    entry.actor_silo_id = actor->silo_id;
    entry.actor_user_id = actor->user_id.value_or(actor->token_id);
    entry.auth_method = actor->by_session ? "session_cookie" : "access_token";
    entry.credential_id = actor->token_id;
  }
  std::optional<db::RequestEffect::Key> k;
  if (key) k = db::RequestEffect::Key{key->token_id, key->key, key->request_sha256};
  Timestamp deadline = request_deadline_ > 0 ? facts.time_started + request_deadline_ : 0;
  return std::make_unique<RequestRecord>(
      std::make_unique<db::RequestEffect>(std::move(k), std::move(entry), deadline));
}

Status Audit::Finish(RequestRecord& record, const KeyAnswer& answer, bool keep_answer) {
  return record.effect()->Finish(ds_, db::EffectAnswer{answer.status, answer.body}, keep_answer);
}

Result<std::vector<model::AuditEntry>> Audit::List(const Actor& actor,
                                                   const model::AuditPageRequest& page) {
  FP_CHECK_OK(RequireFleetAdmin(actor));
  return db::AuditList(ds_, page);
}

Result<int64_t> Audit::CompleteCutShort(Timestamp started_before, bool own) {
  int64_t total = 0;
  std::optional<std::string> server;
  if (own) server = server_id_;
  for (;;) {
    int64_t n = FP_TRY(db::AuditCompleteCutShort(ds_, started_before, 1000, server));
    total += n;
    if (n < 1000) return total;
  }
}

}  // namespace fp::app
