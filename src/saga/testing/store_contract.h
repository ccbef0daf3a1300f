#pragma once

// The contract of a SagaStore (saga/store.h), as the engine relies on it, run against every
// implementation: instantiate with a fixture type `F` that is default-constructible and has
// `saga::SagaStore& store()`:
//
//   INSTANTIATE_TYPED_TEST_SUITE_P(Memory, SagaStoreContract, MemoryStoreFixture);

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "saga/store.h"

namespace fp::saga::testing {

template <typename F>
class SagaStoreContract : public ::testing::Test {
 protected:
  SagaStore& store() { return fixture_.store(); }

  SagaRow Row(const Uuid& id, const std::string& sec = "sec-a", int64_t generation = 1) {
    return SagaRow{id, "contract", R"({"name":"contract","nodes":[]})", SagaState::kRunning,
                   SagaOwner{sec, generation}};
  }

  F fixture_;
};

TYPED_TEST_SUITE_P(SagaStoreContract);

TYPED_TEST_P(SagaStoreContract, CreateInsertsOnceAndLoadReturnsTheRow) {
  Uuid id = Uuid::Random();
  EXPECT_EQ(this->store().Create(this->Row(id)).value(), true);
  EXPECT_EQ(this->store().Create(this->Row(id, "sec-b")).value(), false);
  auto log = this->store().Load(id);
  ASSERT_TRUE(log) << log.error().message();
  EXPECT_EQ(log->saga.id, id);
  EXPECT_EQ(log->saga.name, "contract");
  EXPECT_EQ(log->saga.owner.sec, "sec-a");  // the first creation's
  EXPECT_EQ(log->saga.state, SagaState::kRunning);
  EXPECT_TRUE(log->events.empty());
  auto missing = this->store().Load(Uuid::Random());
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().kind(), ErrorKind::kNotFound);
}

TYPED_TEST_P(SagaStoreContract, EventsAreIdempotentAndLoadedInNodeOrder) {
  Uuid id = Uuid::Random();
  SagaRow row = this->Row(id);
  ASSERT_TRUE(this->store().Create(row));
  const SagaEvent second{1, SagaEventType::kStarted, std::nullopt};
  const SagaEvent first{0, SagaEventType::kSucceeded, R"({"x":1})"};
  ASSERT_TRUE(this->store().Record(id, row.owner, second, std::nullopt, std::nullopt));
  ASSERT_TRUE(this->store().Record(id, row.owner, first, std::nullopt, std::nullopt));
  ASSERT_TRUE(this->store().Record(id, row.owner, first, std::nullopt, std::nullopt));
  auto log = this->store().Load(id).value();
  ASSERT_EQ(log.events.size(), 2u);
  EXPECT_EQ(log.events[0].node_index, 0);
  EXPECT_EQ(log.events[0].data, first.data);
  EXPECT_EQ(log.events[1].node_index, 1);
  EXPECT_EQ(log.events[1].type, SagaEventType::kStarted);
  ASSERT_TRUE(this->store().Record(id, row.owner, std::nullopt, SagaState::kDone, "\"out\""));
  log = this->store().Load(id).value();
  EXPECT_EQ(log.saga.state, SagaState::kDone);
  EXPECT_EQ(log.saga.result, "\"out\"");
}

TYPED_TEST_P(SagaStoreContract, WritesOfAFormerOwnerAreFenced) {
  Uuid id = Uuid::Random();
  ASSERT_TRUE(this->store().Create(this->Row(id, "sec-a", 2)));
  for (const SagaOwner& stale : {SagaOwner{"sec-a", 1}, SagaOwner{"sec-b", 2}}) {
    Status written = this->store().Record(id, stale, SagaEvent{0, SagaEventType::kStarted, {}},
                                          SagaState::kUnwinding, std::nullopt);
    ASSERT_FALSE(written);
    EXPECT_EQ(written.error().kind(), ErrorKind::kServiceUnavailable);
    EXPECT_TRUE(IsLostSaga(written.error())) << written.error().message();
  }
  auto log = this->store().Load(id).value();
  EXPECT_TRUE(log.events.empty());
  EXPECT_EQ(log.saga.state, SagaState::kRunning);
}

TYPED_TEST_P(SagaStoreContract, AFailedWriteLeavesNothingOfItsTransaction) {
  Uuid id = Uuid::Random();
  Status written = this->store().Write([&](StoreTx& tx) -> Status {
    EXPECT_TRUE(this->store().CreateIn(tx, this->Row(id), nullptr).value());
    EXPECT_TRUE(this->store().RecordIn(tx, id, SagaOwner{"sec-a", 1},
                                       SagaEvent{0, SagaEventType::kSucceeded, "{}"}, std::nullopt,
                                       std::nullopt));
    return Fail(Error::Internal("the action failed"));
  });
  ASSERT_FALSE(written);
  EXPECT_EQ(written.error().message(), "the action failed");
  EXPECT_EQ(this->store().Load(id).error().kind(), ErrorKind::kNotFound);
  // Created and recorded in one transaction, both are there.
  ASSERT_TRUE(this->store().Write([&](StoreTx& tx) -> Status {
    FP_CHECK_OK(this->store().CreateIn(tx, this->Row(id), nullptr));
    return this->store().RecordIn(tx, id, SagaOwner{"sec-a", 1},
                                  SagaEvent{0, SagaEventType::kSucceeded, "{}"}, std::nullopt,
                                  std::nullopt);
  }));
  EXPECT_EQ(this->store().Load(id).value().events.size(), 1u);
}

// What one transaction records at once (RecordAllIn): every event and the state, or nothing
// when the owner is not the caller; events recorded already keep their first data.
TYPED_TEST_P(SagaStoreContract, ARecordOfSeveralEventsIsWhollyWrittenOrFenced) {
  Uuid id = Uuid::Random();
  SagaRow row = this->Row(id, "sec-a", 2);
  auto record = [&](const SagaOwner& owner, const SagaRecord& r) {
    return this->store().Write(
        [&](StoreTx& tx) { return this->store().RecordAllIn(tx, id, owner, r); });
  };
  // Created and recorded in one transaction, the owner taken as created.
  ASSERT_TRUE(this->store().Write([&](StoreTx& tx) -> Status {
    FP_CHECK_OK(this->store().CreateIn(tx, row, nullptr));
    return this->store().RecordAllIn(
        tx, id, row.owner,
        SagaRecord{.events = {SagaEvent{0, SagaEventType::kSucceeded, R"({"n":0})"}}});
  }));
  const SagaRecord two{.events = {SagaEvent{1, SagaEventType::kSucceeded, R"({"n":1})"},
                                  SagaEvent{2, SagaEventType::kSucceeded, R"({"n":2})"}},
                       .new_state = SagaState::kDone,
                       .result = R"({"n":2})"};
  // A former owner (an older generation, another server) writes nothing, with or without a
  // state to move to.
  SagaRecord no_state = two;
  no_state.new_state.reset();
  no_state.result.reset();
  for (const SagaOwner& stale : {SagaOwner{"sec-a", 1}, SagaOwner{"sec-b", 2}}) {
    for (const SagaRecord* r : {&two, static_cast<const SagaRecord*>(&no_state)}) {
      Status written = record(stale, *r);
      ASSERT_FALSE(written);
      EXPECT_TRUE(IsLostSaga(written.error())) << written.error().message();
    }
  }
  auto log = this->store().Load(id).value();
  ASSERT_EQ(log.events.size(), 1u);
  EXPECT_EQ(log.saga.state, SagaState::kRunning);

  ASSERT_TRUE(record(row.owner, two));
  log = this->store().Load(id).value();
  ASSERT_EQ(log.events.size(), 3u);
  for (int n = 0; n < 3; ++n) {
    EXPECT_EQ(log.events[static_cast<size_t>(n)].node_index, n);
    EXPECT_EQ(log.events[static_cast<size_t>(n)].data, fmt::format(R"({{"n":{}}})", n));
  }
  EXPECT_EQ(log.saga.state, SagaState::kDone);
  EXPECT_EQ(log.saga.result, R"({"n":2})");

  // Run again (a node's transaction retried after its commit's answer was lost): the events
  // recorded already keep their data.
  SagaRecord again = two;
  again.events[1].data = R"({"n":"again"})";
  again.events.push_back(SagaEvent{3, SagaEventType::kStarted, std::nullopt});
  ASSERT_TRUE(record(row.owner, again));
  log = this->store().Load(id).value();
  ASSERT_EQ(log.events.size(), 4u);
  EXPECT_EQ(log.events[2].data, R"({"n":2})");
  EXPECT_EQ(log.events[3].type, SagaEventType::kStarted);

  // An event twice in one record is written once, the first.
  const SagaEvent first{4, SagaEventType::kSucceeded, R"({"n":4})"};
  SagaEvent second = first;
  second.data = R"({"n":"second"})";
  ASSERT_TRUE(record(
      row.owner,
      SagaRecord{.events = {first, second}, .new_state = SagaState::kDone, .result = "null"}));
  log = this->store().Load(id).value();
  ASSERT_EQ(log.events.size(), 5u);
  EXPECT_EQ(log.events[4].data, first.data);
}

TYPED_TEST_P(SagaStoreContract, ListsTheUnfinishedSagasOfOneOwnerOldestFirst) {
  std::vector<Uuid> ours;
  for (int i = 0; i < 3; ++i) {
    ours.push_back(Uuid::TimeOrdered());
    ASSERT_TRUE(this->store().Create(this->Row(ours.back())));
  }
  Uuid theirs = Uuid::TimeOrdered();
  ASSERT_TRUE(this->store().Create(this->Row(theirs, "sec-b")));
  Uuid done = Uuid::TimeOrdered();
  ASSERT_TRUE(this->store().Create(this->Row(done)));
  ASSERT_TRUE(
      this->store().Record(done, SagaOwner{"sec-a", 1}, std::nullopt, SagaState::kDone, "null"));
  ASSERT_TRUE(this->store().Record(ours[1], SagaOwner{"sec-a", 1}, std::nullopt,
                                   SagaState::kUnwinding, std::nullopt));
  std::vector<OwnedSaga> expected;
  for (const Uuid& id : ours) expected.push_back(OwnedSaga{id, 1});
  EXPECT_EQ(this->store().ListUnfinished("sec-a").value(), expected);
  EXPECT_EQ(this->store().ListUnfinished("sec-b").value(), (std::vector<OwnedSaga>{{theirs, 1}}));
}

TYPED_TEST_P(SagaStoreContract, ClaimBumpsTheGenerationAndFencesTheFormerOne) {
  Uuid id = Uuid::Random();
  ASSERT_TRUE(this->store().Create(this->Row(id, "sec-a", 3)));
  EXPECT_EQ(this->store().Claim(id, SagaOwner{"sec-b", 3}).value(), std::nullopt);
  EXPECT_EQ(this->store().Claim(id, SagaOwner{"sec-a", 2}).value(), std::nullopt);
  EXPECT_EQ(this->store().Claim(id, SagaOwner{"sec-a", 3}).value(), std::optional<int64_t>(4));
  Status stale =
      this->store().Record(id, SagaOwner{"sec-a", 3}, SagaEvent{0, SagaEventType::kStarted, {}},
                           std::nullopt, std::nullopt);
  ASSERT_FALSE(stale);
  EXPECT_TRUE(IsLostSaga(stale.error()));
  EXPECT_TRUE(
      this->store().Record(id, SagaOwner{"sec-a", 4}, std::nullopt, SagaState::kDone, "null"));
  EXPECT_EQ(this->store().Load(id).value().saga.owner.generation, 4);
  // At rest: nothing to claim.
  EXPECT_EQ(this->store().Claim(id, SagaOwner{"sec-a", 4}).value(), std::nullopt);
}

TYPED_TEST_P(SagaStoreContract, MarkStuckMovesOnlyAnUnfinishedSagaOfItsOwner) {
  Uuid id = Uuid::Random();
  ASSERT_TRUE(this->store().Create(this->Row(id)));
  EXPECT_FALSE(this->store().MarkStuck(id, SagaOwner{"sec-b", 1}, R"({"why":1})").value());
  EXPECT_FALSE(this->store().MarkStuck(id, SagaOwner{"sec-a", 0}, R"({"why":1})").value());
  EXPECT_TRUE(this->store().MarkStuck(id, SagaOwner{"sec-a", 1}, R"({"why":2})").value());
  auto log = this->store().Load(id).value();
  EXPECT_EQ(log.saga.state, SagaState::kStuck);
  EXPECT_EQ(log.saga.result, R"({"why":2})");
  EXPECT_FALSE(
      this->store().MarkStuck(id, SagaOwner{"sec-a", 1}, R"({"why":3})").value());  // at rest
  EXPECT_TRUE(this->store().ListUnfinished("sec-a").value().empty());
}

REGISTER_TYPED_TEST_SUITE_P(SagaStoreContract, CreateInsertsOnceAndLoadReturnsTheRow,
                            EventsAreIdempotentAndLoadedInNodeOrder, WritesOfAFormerOwnerAreFenced,
                            AFailedWriteLeavesNothingOfItsTransaction,
                            ARecordOfSeveralEventsIsWhollyWrittenOrFenced,
                            ListsTheUnfinishedSagasOfOneOwnerOldestFirst,
                            ClaimBumpsTheGenerationAndFencesTheFormerOne,
                            MarkStuckMovesOnlyAnUnfinishedSagaOfItsOwner);

}  // namespace fp::saga::testing
