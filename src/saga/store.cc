#include "saga/store.h"

#include <fmt/format.h>

#include <array>

namespace fp::saga {

namespace {
constexpr std::array<std::string_view, 5> kStates = {"running", "unwinding", "done", "unwound",
                                                     "stuck"};
constexpr std::array<std::string_view, 6> kEvents = {
    "started", "succeeded", "failed", "undo_started", "undo_finished", "undo_failed"};
}  // namespace

std::string_view ToString(SagaState s) { return kStates[static_cast<size_t>(s)]; }
std::optional<SagaState> ParseSagaState(std::string_view text) {
  for (size_t i = 0; i < kStates.size(); ++i) {
    if (kStates[i] == text) return static_cast<SagaState>(i);
  }
  return std::nullopt;
}
std::string_view ToString(SagaEventType t) { return kEvents[static_cast<size_t>(t)]; }
std::optional<SagaEventType> ParseSagaEventType(std::string_view text) {
  for (size_t i = 0; i < kEvents.size(); ++i) {
    if (kEvents[i] == text) return static_cast<SagaEventType>(i);
  }
  return std::nullopt;
}

namespace {
// What IsLostSaga looks for; every LostSagaError carries it.
constexpr std::string_view kLostMarker = "is no longer owned by";
}  // namespace

Error LostSagaError(const Uuid& saga_id, const SagaOwner& owner) {
  return Error::Unavailable(fmt::format(
      "saga {} {} this server (coordinator \"{}\", generation {}): another server adopted it "
      "and carries it on; retry the request (with the same Idempotency-Key the retry gets the "
      "operation's outcome)",
      saga_id.ToString(), kLostMarker, owner.sec, owner.generation));
}

namespace {
constexpr std::string_view kExistsMarker = "already exists: it cannot be created again";
}  // namespace

Error SagaExistsError(const Uuid& saga_id) {
  return Error::Internal(fmt::format("saga {} {}", saga_id.ToString(), kExistsMarker));
}

bool IsSagaExists(const Error& e) {
  return e.kind() == ErrorKind::kInternal && e.message().find(kExistsMarker) != std::string::npos;
}

bool IsLostSaga(const Error& e) {
  return e.kind() == ErrorKind::kServiceUnavailable &&
         e.message().find(kLostMarker) != std::string::npos;
}

Result<bool> SagaStore::Create(const SagaRow& row, const SagaOrigin* origin) {
  bool created = false;
  Status written = Write([&](StoreTx& tx) -> Status {
    created = FP_TRY(CreateIn(tx, row, origin));
    return Ok();
  });
  if (!written && IsSagaExists(written.error())) return false;  // found by a held-back insert
  FP_CHECK_OK(written);
  return created;
}

Status SagaStore::RecordAllIn(StoreTx& tx, const Uuid& saga_id, const SagaOwner& owner,
                              const SagaRecord& record) {
  if (record.events.empty()) {
    return RecordIn(tx, saga_id, owner, std::nullopt, record.new_state, record.result);
  }
  for (size_t i = 0; i < record.events.size(); ++i) {
    bool last = i + 1 == record.events.size();
    FP_CHECK_OK(RecordIn(tx, saga_id, owner, record.events[i],
                         last ? record.new_state : std::nullopt,
                         last ? record.result : std::nullopt));
  }
  return Ok();
}

Status SagaStore::Record(const Uuid& saga_id, const SagaOwner& owner,
                         const std::optional<SagaEvent>& event, std::optional<SagaState> new_state,
                         const std::optional<std::string>& result) {
  return Write([&](StoreTx& tx) { return RecordIn(tx, saga_id, owner, event, new_state, result); });
}

}  // namespace fp::saga
