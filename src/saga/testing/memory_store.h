#pragma once

// Test helper: the saga store in memory, with the semantics the engine relies on (one
// transaction per Write, all or nothing; idempotent events; fencing by owner), and a set of
// strings that actions may change in the saga's own transaction, standing in for the tables a
// real action writes to. Nothing survives the object: a test "crashes" by building a new store
// from the log prefix it wants.

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/mutex.h"
#include "saga/store.h"

namespace fp::saga::testing {

class MemoryStore final : public SagaStore {
 public:
  struct Saga {
    SagaRow row;
    std::vector<SagaEvent> events;  // in the order written
  };
  struct State {
    std::map<Uuid, Saga> sagas;
    std::set<std::string> rows;  // the actions' "table"
    int64_t clock = 0;           // orders sagas by creation
  };

  // The StoreTx of this store: a copy of the state, which replaces it if the body succeeds.
  class Tx final : public StoreTx {
   public:
    explicit Tx(State state) : state_(std::move(state)) {}
    std::set<std::string>& rows() { return state_.rows; }
    // Writes run one at a time here anyway: only counted (write_queue_joins).
    void JoinWriteQueue() override { joined_queue_ = true; }

   private:
    friend class MemoryStore;
    State state_;
    bool joined_queue_ = false;
    int64_t records_ = 0;
  };

  // Writes are serialised; a Write holds the store for its whole body.
  Status Write(const std::function<Status(StoreTx&)>& body) override {
    MutexLock lock(mu_);
    Tx tx(state_);
    FP_CHECK_OK(body(tx));
    state_ = std::move(tx.state_);
    ++commits_;
    if (tx.joined_queue_) ++write_queue_joins_;
    records_ += tx.records_;
    return Ok();
  }

  Result<bool> CreateIn(StoreTx& stx, const SagaRow& row, const SagaOrigin* origin) override {
    State& s = static_cast<Tx&>(stx).state_;
    if (s.sagas.count(row.id) != 0) return false;
    Saga saga{row, {}};
    saga.row.time_created = ++s.clock;
    s.sagas.emplace(row.id, std::move(saga));
    if (origin) FP_CHECK_OK(origin->RecordIn(stx, row.id));
    return true;
  }

  Status RecordIn(StoreTx& stx, const Uuid& saga_id, const SagaOwner& owner,
                  const std::optional<SagaEvent>& event, std::optional<SagaState> new_state,
                  const std::optional<std::string>& result) override {
    State& s = static_cast<Tx&>(stx).state_;
    auto it = s.sagas.find(saga_id);
    if (it == s.sagas.end() || it->second.row.owner.sec != owner.sec ||
        it->second.row.owner.generation != owner.generation) {
      return Fail(LostSagaError(saga_id, owner));
    }
    Saga& saga = it->second;
    if (event) {
      bool duplicate = std::any_of(saga.events.begin(), saga.events.end(), [&](const auto& e) {
        return e.node_index == event->node_index && e.type == event->type;
      });
      if (!duplicate) saga.events.push_back(*event);
    }
    if (new_state) {
      saga.row.state = *new_state;
      saga.row.result = result;
    }
    return Ok();
  }

  // The default, counted (records()): the datastore writes each record's events in one statement.
  Status RecordAllIn(StoreTx& stx, const Uuid& saga_id, const SagaOwner& owner,
                     const SagaRecord& record) override {
    FP_CHECK_OK(SagaStore::RecordAllIn(stx, saga_id, owner, record));
    ++static_cast<Tx&>(stx).records_;
    return Ok();
  }

  Result<SagaLog> Load(const Uuid& id) override {
    MutexLock lock(mu_);
    auto it = state_.sagas.find(id);
    if (it == state_.sagas.end()) return Fail(Error::NotFoundById("saga", id.ToString()));
    SagaLog log{it->second.row, it->second.events};
    std::stable_sort(log.events.begin(), log.events.end(),
                     [](const auto& a, const auto& b) { return a.node_index < b.node_index; });
    return log;
  }

  Result<std::vector<OwnedSaga>> ListUnfinished(const std::string& sec) override {
    MutexLock lock(mu_);
    std::vector<std::pair<Timestamp, OwnedSaga>> found;
    for (const auto& [id, saga] : state_.sagas) {
      if (saga.row.owner.sec == sec && Unfinished(saga)) {
        found.emplace_back(saga.row.time_created, OwnedSaga{id, saga.row.owner.generation});
      }
    }
    std::sort(found.begin(), found.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<OwnedSaga> out;
    for (const auto& f : found) out.push_back(f.second);
    return out;
  }

  Result<std::optional<int64_t>> Claim(const Uuid& id, const SagaOwner& owner) override {
    MutexLock lock(mu_);
    Saga* saga = OwnedBy(id, owner);
    if (!saga || !Unfinished(*saga)) return std::optional<int64_t>();
    ++commits_;
    return std::optional<int64_t>(++saga->row.owner.generation);
  }

  Result<bool> MarkStuck(const Uuid& id, const SagaOwner& owner,
                         const std::string& result) override {
    MutexLock lock(mu_);
    Saga* saga = OwnedBy(id, owner);
    if (!saga || !Unfinished(*saga)) return false;
    saga->row.state = SagaState::kStuck;
    saga->row.result = result;
    ++commits_;
    return true;
  }

  // Another coordinator adopts the saga, as a live server adopts a dead one's: it owns it from
  // now on, under the next generation. Returns the new owner.
  SagaOwner Adopt(const Uuid& id, const std::string& sec) {
    MutexLock lock(mu_);
    SagaOwner& owner = state_.sagas.at(id).row.owner;
    owner = SagaOwner{sec, owner.generation + 1};
    return owner;
  }

  // Committed Writes (and MarkStuck calls that changed a saga): the store's durable commits.
  // Committed transactions whose body joined the write queue.
  int64_t write_queue_joins() {
    MutexLock lock(mu_);
    return write_queue_joins_;
  }
  int64_t commits() {
    MutexLock lock(mu_);
    return commits_;
  }
  // RecordAllIn calls in committed transactions (the datastore writes each one's events in one
  // statement).
  int64_t records() {
    MutexLock lock(mu_);
    return records_;
  }
  // The actions' "table", as last committed.
  std::set<std::string> rows() {
    MutexLock lock(mu_);
    return state_.rows;
  }
  void SetRows(std::set<std::string> rows) {
    MutexLock lock(mu_);
    state_.rows = std::move(rows);
  }

 private:
  static bool Unfinished(const Saga& saga) {
    return saga.row.state == SagaState::kRunning || saga.row.state == SagaState::kUnwinding;
  }
  Saga* OwnedBy(const Uuid& id, const SagaOwner& owner) FP_REQUIRES(mu_) {
    auto it = state_.sagas.find(id);
    if (it == state_.sagas.end() || it->second.row.owner.sec != owner.sec ||
        it->second.row.owner.generation != owner.generation) {
      return nullptr;
    }
    return &it->second;
  }

  Mutex mu_;
  State state_ FP_GUARDED_BY(mu_);
  int64_t commits_ FP_GUARDED_BY(mu_) = 0;
  int64_t write_queue_joins_ FP_GUARDED_BY(mu_) = 0;
  int64_t records_ FP_GUARDED_BY(mu_) = 0;
};

}  // namespace fp::saga::testing
