// The saga story operators read (app/saga_list.h).

#include "app/saga_list.h"

#include <gtest/gtest.h>

#include "app/testing/services.h"
#include "db/sagas.h"

namespace fp::app {
namespace {

TEST(SagaListTest, ANodesEventsWrittenByOneTransactionReadInTheOrderTheyHappened) {
  testing::TempServices app;
  Actor admin{Uuid::Random(), Uuid::Random(), model::Role::kFleetAdmin};
  saga::SagaDag dag;
  dag.name = "toy";
  dag.nodes = {{"first", "toy.first"}, {"second", "toy.second"}};
  saga::SagaRow row{Uuid::TimeOrdered(), "toy", dag.ToText(), saga::SagaState::kRunning,
                    saga::SagaOwner{"sec", 1}};
  db::DatastoreSagaStore store(*app.ds);
  ASSERT_TRUE(store.Create(row).value());
  auto failure = saga::ErrorToJson(Error::Unavailable("the switch did not answer")).dump();
  // Each pair in one transaction: the same time, so only their kinds order them (an undo's
  // "finished" sorts before its "started" by name).
  auto record = [&](std::vector<saga::SagaEvent> events, std::optional<saga::SagaState> state,
                    std::optional<std::string> result) {
    ASSERT_TRUE(store.Write([&](saga::StoreTx& tx) -> Status {
      for (size_t i = 0; i < events.size(); ++i) {
        bool last = i + 1 == events.size();
        FP_CHECK_OK(store.RecordIn(tx, row.id, row.owner, events[i], last ? state : std::nullopt,
                                   last ? result : std::nullopt));
      }
      return Ok();
    }));
  };
  record({{0, saga::SagaEventType::kStarted, "null"}, {0, saga::SagaEventType::kSucceeded, "{}"}},
         std::nullopt, std::nullopt);
  record({{1, saga::SagaEventType::kStarted, "null"}, {1, saga::SagaEventType::kFailed, failure}},
         saga::SagaState::kUnwinding, failure);
  record({{0, saga::SagaEventType::kUndoStarted, "null"},
          {0, saga::SagaEventType::kUndoFinished, "null"}},
         saga::SagaState::kUnwound, failure);

  auto story = app.sagas.View(admin, row.id);
  ASSERT_TRUE(story) << story.error().message();
  ASSERT_EQ(story->nodes.size(), 2u);
  EXPECT_EQ(story->nodes[0].outcome, "undone");
  EXPECT_EQ(story->nodes[1].outcome, "failed");
  ASSERT_TRUE(story->nodes[1].error);
  EXPECT_EQ(story->nodes[1].error->message(), "the switch did not answer");
  EXPECT_EQ(story->summary.state, "unwound");
  EXPECT_EQ(story->explanation,
            "unwound: node \"second\" failed: the switch did not answer; what the nodes before "
            "it did was undone");
  Actor viewer{Uuid::Random(), Uuid::Random(), model::Role::kSiloViewer};
  EXPECT_EQ(app.sagas.View(viewer, row.id).error().kind(), ErrorKind::kForbidden);
}

}  // namespace
}  // namespace fp::app
