#include "app/idempotency.h"

#include <gtest/gtest.h>

#include "app/testing/services.h"

namespace fp::app {
namespace {

using Outcome = KeyRecall::Outcome;

class IdempotencyTest : public ::testing::Test {
 protected:
  testing::TempServices app_;
  Uuid token_ = Uuid::Random();
  std::string hash_ = Idempotency::RequestHash("POST\n/v1/projects\n\n{}");
};

TEST_F(IdempotencyTest, AnUnknownKeyRunsTheRequest) {
  auto recall = app_.idempotency.Recall(token_, "k", hash_);
  ASSERT_TRUE(recall);
  EXPECT_EQ(recall->outcome, Outcome::kRun);
}

TEST_F(IdempotencyTest, AFinishedAnswerIsRecalledForTheSameRequestOnly) {
  ASSERT_TRUE(app_.idempotency.Finish(token_, "k", hash_, KeyAnswer{201, "{\"a\":1}"}));
  auto same = app_.idempotency.Recall(token_, "k", hash_);
  ASSERT_TRUE(same);
  EXPECT_EQ(same->outcome, Outcome::kAnswer);
  EXPECT_EQ(same->answer.status, 201);
  EXPECT_EQ(same->answer.body, "{\"a\":1}");
  auto other = app_.idempotency.Recall(token_, "k", Idempotency::RequestHash("other"));
  ASSERT_TRUE(other);
  EXPECT_EQ(other->outcome, Outcome::kOtherRequest);
  // Keys belong to their token.
  EXPECT_EQ(app_.idempotency.Recall(Uuid::Random(), "k", hash_)->outcome, Outcome::kRun);
}

TEST_F(IdempotencyTest, AKeyedWriteRecordsItsAnswerWithItsEffect) {
  Actor actor = *app_.tokens.Authenticate(**app_.tokens.BootstrapDev());
  token_ = actor.token_id;
  auto record =
      app_.audit.Begin(&actor, RequestFacts{.request_id = "r1"}, RequestKey{token_, "k2", hash_});
  Request<model::Project> rq{{actor, record->effect()}, [](const model::Project& p) {
                               return KeyAnswer{201, p.name};
                             }};
  ASSERT_TRUE(app_.projects.Create(rq, "web", ""));
  EXPECT_EQ(record->outcome(), RequestRecord::Outcome::kAnswered);
  EXPECT_EQ(record->answer().body, "web");
  auto recall = app_.idempotency.Recall(token_, "k2", hash_);
  ASSERT_TRUE(recall);
  EXPECT_EQ(recall->outcome, Outcome::kAnswer);
  EXPECT_EQ(recall->answer.status, 201);
  EXPECT_EQ(recall->answer.body, "web");
}

}  // namespace
}  // namespace fp::app
