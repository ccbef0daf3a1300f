// A request's idempotency record and audit entry commit with the effect they describe
// (db/request_effect.h).

#include "db/request_effect.h"

#include <gtest/gtest.h>

#include "common/testing/manual_clock.h"
#include "db/audit_log.h"
#include "db/idempotency.h"
#include "db/sagas.h"
#include "db/testing/temp_datastore.h"
#include "saga/dag.h"

namespace fp::db {
namespace {

using testing::TempDatastore;

class RequestEffectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(ds_->Write([](Tx& tx) -> Status {
      FP_TRY(tx.Exec("CREATE TABLE effect (v INTEGER NOT NULL)"));
      return Ok();
    }));
  }

  model::AuditEntry Entry(const std::string& request_id) {
    model::AuditEntry e;
    e.id = Uuid::TimeOrdered();
    e.time_started = ds_->clock().Now();
    e.request_id = request_id;
    e.request_uri = "/v1/things";
    e.operation_id = "thing_create";
    e.source_ip = "127.0.0.1";
    e.actor_silo_id = Uuid::Random();
    e.actor_user_id = token_;
    e.auth_method = "access_token";
    e.credential_id = token_;
    e.server_id = "server-a";
    return e;
  }
  std::unique_ptr<RequestEffect> Request(const std::string& request_id, bool keyed = true) {
    std::optional<RequestEffect::Key> key;
    if (keyed) key = RequestEffect::Key{token_, "k", "hash"};
    return std::make_unique<RequestEffect>(key, Entry(request_id));
  }
  static Effect<int64_t> AnswerWithValue(RequestEffect& r) {
    return Effect<int64_t>{&r, [](const int64_t& v) {
                             return EffectAnswer{201, std::to_string(v)};
                           }};
  }

  // The effect: a row, whose value is the write's result.
  Result<int64_t> Write(const Effect<int64_t>& effect, int64_t v, bool fail = false) {
    return ds_->Write<int64_t>(effect, [&](Tx& tx) -> Result<int64_t> {
      FP_TRY(tx.Exec("INSERT INTO effect (v) VALUES (?)", v));
      if (fail) return Fail(Error::InvalidRequest("refused after the insert"));
      return v;
    });
  }

  int64_t Effects() {
    return ds_
        ->Read<int64_t>([](Tx& tx) -> Result<int64_t> {
          return FP_TRY(tx.QueryRow("SELECT count(*) FROM effect"))->Int(0);
        })
        .value();
  }
  // Every entry, completed or not, of `request_id`.
  std::vector<std::pair<bool, int64_t>> EntriesOf(const std::string& request_id) {
    return ds_
        ->Read<std::vector<std::pair<bool, int64_t>>>(
            [&](Tx& tx) -> Result<std::vector<std::pair<bool, int64_t>>> {
              std::vector<std::pair<bool, int64_t>> out;
              for (const Row& r : FP_TRY(
                       tx.Query("SELECT time_completed IS NOT NULL, coalesce(http_status, 0) FROM "
                                "audit_log WHERE request_id = ?",
                                request_id))) {
                out.emplace_back(r.Int(0) != 0, r.Int(1));
              }
              return out;
            })
        .value();
  }

  static SagaRow ToySaga() {
    SagaRow row;
    row.id = Uuid::Random();
    row.name = "toy";
    row.dag = "{}";
    row.owner = SagaOwner{"sec", 1};
    return row;
  }

  std::shared_ptr<fp::testing::ManualClock> clock_ = std::make_shared<fp::testing::ManualClock>();
  TempDatastore ds_{clock_};
  Uuid token_ = Uuid::Random();
};

TEST_F(RequestEffectTest, TheAnswerAndTheEntryCommitWithTheEffectAndNotWithoutIt) {
  auto request = Request("r1");
  EXPECT_FALSE(Write(AnswerWithValue(*request), 7, /*fail=*/true));  // rolled back: nothing
  EXPECT_EQ(request->outcome(), RequestEffect::Outcome::kNone);
  EXPECT_TRUE(EntriesOf("r1").empty()) << "an entry committed for an effect that rolled back";
  ASSERT_TRUE(Write(AnswerWithValue(*request), 8));
  EXPECT_EQ(request->outcome(), RequestEffect::Outcome::kAnswered);
  EXPECT_EQ(request->answer().body, "8");
  ASSERT_TRUE(Write(AnswerWithValue(*request), 9));  // a later write records nothing more
  auto record = IdempotencyLookup(*ds_, token_, "k");
  ASSERT_TRUE(record && *record);
  EXPECT_TRUE((*record)->done);
  EXPECT_EQ((*record)->status, 201);
  EXPECT_EQ((*record)->body, "8");
  EXPECT_EQ(EntriesOf("r1"), (std::vector<std::pair<bool, int64_t>>{{true, 201}}));
  EXPECT_EQ(Effects(), 2);
  // The request's end writes nothing more: its entry is complete.
  int64_t commits = ds_->durable_commits();
  ASSERT_TRUE(request->Finish(*ds_, {201, "8"}, /*keep_answer=*/false));
  EXPECT_EQ(ds_->durable_commits(), commits);
}

// On PostgreSQL the answer's audit entry goes with the COMMIT: a write of held-back changes
// and its entry is one exchange, and the entry is there, complete, once it committed.
TEST_F(RequestEffectTest, OnPostgresTheEntryGoesWithTheCommit) {
  if (!ds_.postgres()) GTEST_SKIP() << "SQLite runs in the process: no round trips to count";
  auto request = Request("r-held", /*keyed=*/false);
  const int64_t before = ds_->round_trips();
  auto written = ds_->Write<int64_t>(AnswerWithValue(*request), [](Tx& tx) -> Result<int64_t> {
    FP_CHECK_OK(tx.ExecLater("INSERT INTO effect (v) VALUES (?)", 5));
    return 5;
  });
  ASSERT_TRUE(written) << written.error().message();
  EXPECT_EQ(ds_->round_trips() - before, 1) << "the begin, the insert, the entry and COMMIT";
  EXPECT_EQ(EntriesOf("r-held"), (std::vector<std::pair<bool, int64_t>>{{true, 201}}));
  EXPECT_EQ(request->outcome(), RequestEffect::Outcome::kAnswered);
}

// --request-deadline: a request whose first effect would commit past its deadline changes
// nothing; one whose first effect committed in time goes on.
TEST_F(RequestEffectTest, AFirstEffectPastTheRequestsDeadlineIsRefusedAndNothingCommits) {
  model::AuditEntry entry = Entry("late");
  RequestEffect late(RequestEffect::Key{token_, "late", "hash"}, entry, entry.time_started + 1);
  clock_->Advance(2);  // past the deadline
  auto refused = Write(AnswerWithValue(late), 1);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().kind(), ErrorKind::kServiceUnavailable);
  EXPECT_NE(refused.error().message().find("past the server's --request-deadline"),
            std::string::npos)
      << refused.error().message();
  SagaRow row = ToySaga();
  RequestSaga origin(&late, /*ends_request=*/true);
  DatastoreSagaStore store(*ds_);
  EXPECT_FALSE(store.Create(row, &origin));
  EXPECT_EQ(late.outcome(), RequestEffect::Outcome::kNone);
  EXPECT_EQ(Effects(), 0);
  EXPECT_FALSE(SagaLoad(*ds_, row.id)) << "a saga was created past the deadline";
  EXPECT_TRUE(EntriesOf("late").empty());
  EXPECT_FALSE(*IdempotencyLookup(*ds_, token_, "late"));

  // In time, the first effect commits, and the request goes on past its deadline.
  entry = Entry("timely");
  RequestEffect timely(std::nullopt, entry, entry.time_started + 20'000);
  ASSERT_TRUE(Write(AnswerWithValue(timely), 2));
  clock_->Advance(25'000);  // past the deadline
  RequestSaga then(&timely, /*ends_request=*/true);
  EXPECT_TRUE(store.Create(ToySaga(), &then));
  EXPECT_EQ(Effects(), 1);
}

// What a request's saga records of it (its row's origin, which operators read and a resumed
// saga's agent calls take the request id from): the request, the operation, the audit entry,
// and the acting user if any, as a JSON object with its keys sorted.
TEST_F(RequestEffectTest, ASagasOriginDescribesItsRequestAsSortedJson) {
  model::AuditEntry by_user = Entry("req-\"quoted\"\u00e9");
  model::AuditEntry unattributed = Entry("req-2");
  unattributed.actor_user_id.reset();
  for (const model::AuditEntry& e : {by_user, unattributed}) {
    RequestEffect effect(std::nullopt, e, e.time_started + 1'000'000);
    nlohmann::json expected{{"request_id", e.request_id},
                            {"operation_id", e.operation_id},
                            {"audit_entry_id", e.id.ToString()}};
    if (e.actor_user_id) {
      expected["actor"] = {{"kind", "silo_user"},
                           {"silo_id", e.actor_silo_id->ToString()},
                           {"silo_user_id", e.actor_user_id->ToString()}};
    }
    EXPECT_EQ(RequestSaga(&effect, true).Describe(), expected.dump());
    EXPECT_EQ(RequestSaga(&effect, true).request_id(), e.request_id);
  }
  EXPECT_EQ(RequestSaga(nullptr, true).Describe(), std::nullopt);
  EXPECT_EQ(RequestSaga(nullptr, true).request_id(), "");
}

TEST_F(RequestEffectTest, ARequestWithoutAnEffectRecordsItsEntryAtItsEnd) {
  auto request = Request("r2", /*keyed=*/false);
  EXPECT_FALSE(Write(AnswerWithValue(*request), 1, /*fail=*/true));
  ASSERT_TRUE(request->Finish(
      *ds_, {400, R"({"request_id":"r2","error_code":"InvalidRequest","message":"no"})"}, false));
  auto listed = AuditList(*ds_, model::AuditPageRequest{.start = 0});
  ASSERT_TRUE(listed);
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->front().request_id, "r2");
  EXPECT_EQ(listed->front().result, model::AuditResultKind::kError);
  EXPECT_EQ(listed->front().http_status, 400);
  EXPECT_EQ(listed->front().error_code, "InvalidRequest");
  EXPECT_EQ(listed->front().error_message, "no");
}

TEST_F(RequestEffectTest, ASecondRequestUnderTheKeyRollsBackItsEffect) {
  auto first = Request("r1");
  ASSERT_TRUE(Write(AnswerWithValue(*first), 1));
  // E.g. another server on the same database ran the request first.
  auto second = Request("r2");
  auto again = Write(AnswerWithValue(*second), 2);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().kind(), ErrorKind::kServiceUnavailable);
  EXPECT_EQ(second->outcome(), RequestEffect::Outcome::kTaken);
  EXPECT_EQ(Effects(), 1);
  EXPECT_TRUE(EntriesOf("r2").empty());
}

TEST_F(RequestEffectTest, ASagaCarriesTheEntryFromItsCreationToItsEnd) {
  SagaRow row = ToySaga();
  auto request = Request("r3");
  request->set_saga_success_status(202);
  RequestSaga origin(request.get(), /*ends_request=*/true);
  DatastoreSagaStore store(*ds_);
  ASSERT_TRUE(store.Create(row, &origin));
  EXPECT_EQ(request->outcome(), RequestEffect::Outcome::kSaga);
  auto record = IdempotencyLookup(*ds_, token_, "k");
  ASSERT_TRUE(record && *record);
  EXPECT_FALSE((*record)->done);
  EXPECT_EQ((*record)->saga_id, row.id);
  EXPECT_EQ(EntriesOf("r3"), (std::vector<std::pair<bool, int64_t>>{{false, 0}}));
  EXPECT_TRUE(AuditList(*ds_, model::AuditPageRequest{.start = 0})->empty())
      << "an entry in progress is listed";
  // The request's own end leaves the entry to the saga.
  ASSERT_TRUE(request->Finish(*ds_, {202, "{}"}, /*keep_answer=*/false));
  EXPECT_EQ(EntriesOf("r3"), (std::vector<std::pair<bool, int64_t>>{{false, 0}}));
  ASSERT_TRUE(store.Record(row.id, row.owner, std::nullopt, SagaState::kDone, "{}"));
  EXPECT_EQ(EntriesOf("r3"), (std::vector<std::pair<bool, int64_t>>{{true, 202}}));
}

TEST_F(RequestEffectTest, ASagaThatUnwindsCompletesTheEntryWithItsError) {
  SagaRow row = ToySaga();
  auto request = Request("r4", /*keyed=*/false);
  RequestSaga origin(request.get(), /*ends_request=*/true);
  DatastoreSagaStore store(*ds_);
  ASSERT_TRUE(store.Create(row, &origin));
  auto as_json = saga::ErrorToJson(Error::Unavailable("switch agent at x did not answer"));
  ASSERT_TRUE(store.Record(row.id, row.owner, std::nullopt, SagaState::kUnwound, as_json.dump()));
  auto listed = AuditList(*ds_, model::AuditPageRequest{.start = 0});
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->front().result, model::AuditResultKind::kError);
  EXPECT_EQ(listed->front().http_status, 503);
  EXPECT_EQ(listed->front().error_message, "switch agent at x did not answer");
}

TEST_F(RequestEffectTest, AnEntryNoSagaWillCompleteIsCompletedAsCutShort) {
  // A create saga that does not end the request (a start saga follows), then the server stops.
  SagaRow row = ToySaga();
  auto request = Request("r5", /*keyed=*/false);
  RequestSaga origin(request.get(), /*ends_request=*/false);
  DatastoreSagaStore store(*ds_);
  ASSERT_TRUE(store.Create(row, &origin));
  EXPECT_EQ(AuditCompleteCutShort(*ds_, ds_->clock().Now() + 1, 10).value(), 0)
      << "the running create saga carries the request: it is not cut short";
  ASSERT_TRUE(store.Record(row.id, row.owner, std::nullopt, SagaState::kDone, "{}"));
  EXPECT_EQ(EntriesOf("r5"), (std::vector<std::pair<bool, int64_t>>{{false, 0}}))
      << "the create saga's end does not complete a request a start saga goes on with";
  EXPECT_EQ(AuditCompleteCutShort(*ds_, request->entry().time_started, 10).value(), 0)
      << "only entries started before the bound";
  EXPECT_EQ(AuditCompleteCutShort(*ds_, ds_->clock().Now() + 1, 10, "server-b").value(), 0)
      << "another server's entry (its request may still run)";
  EXPECT_EQ(AuditCompleteCutShort(*ds_, ds_->clock().Now() + 1, 10, "server-a").value(), 1);
  auto listed = AuditList(*ds_, model::AuditPageRequest{.start = 0});
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->front().result, model::AuditResultKind::kError);
  EXPECT_NE(listed->front().error_message.find("the server stopped before this request"),
            std::string::npos);
}

TEST_F(RequestEffectTest, AnIntentIsCompletedByTheEffectOrByACutShortSweep) {
  // A stop tells its sled before the write that records it: the entry goes first.
  auto stopped = Request("r7", /*keyed=*/false);
  ASSERT_TRUE(stopped->RecordIntent(*ds_));
  EXPECT_EQ(EntriesOf("r7"), (std::vector<std::pair<bool, int64_t>>{{false, 0}}));
  ASSERT_TRUE(Write(AnswerWithValue(*stopped), 3));
  EXPECT_EQ(EntriesOf("r7"), (std::vector<std::pair<bool, int64_t>>{{true, 201}}));
  // The server stops between the sled call and the write: the sweep says what happened.
  auto cut = Request("r8", /*keyed=*/false);
  ASSERT_TRUE(cut->RecordIntent(*ds_));
  EXPECT_EQ(AuditCompleteCutShort(*ds_, ds_->clock().Now() + 1, 10, "server-a").value(), 1);
  EXPECT_EQ(EntriesOf("r8"), (std::vector<std::pair<bool, int64_t>>{{true, 503}}));
}

// PostgreSQL runs a write's body again after a serialization failure: what the rolled-back
// run recorded must not stop the retried run from recording (else the saga commits without its
// key's record).
TEST_F(RequestEffectTest, ARetriedWriteRecordsTheKeyInTheRunThatCommits) {
  if (!testing::OnPostgres()) GTEST_SKIP() << "the SQLite engine runs a body once";
  SagaRow row = ToySaga();
  auto request = Request("r6");
  RequestSaga origin(request.get(), /*ends_request=*/true);
  int runs = 0;
  ASSERT_TRUE(ds_->Write([&](Tx& tx) -> Status {
    ++runs;
    FP_TRY(SagaCreateIn(tx, row, &origin));
    if (runs == 1) {
      FP_TRY(tx.Exec("DO $$BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '40001'; END$$"));
    }
    return Ok();
  }));
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(request->outcome(), RequestEffect::Outcome::kSaga);
  auto record = IdempotencyLookup(*ds_, token_, "k");
  ASSERT_TRUE(record && *record) << "the saga committed without its key's record";
  EXPECT_EQ((*record)->saga_id, row.id);
  EXPECT_EQ(EntriesOf("r6").size(), 1u);
}

}  // namespace
}  // namespace fp::db
