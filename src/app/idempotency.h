#pragma once

// Idempotency keys for mutating requests (product.md difference 13), as the API uses them.
// The guarantees, and what a crash at each instant leaves behind, are db/idempotency.h's; this
// service turns a key's record into what the request gets, so that the API never reads the
// datastore itself.

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "app/request.h"
#include "common/error.h"
#include "common/uuid.h"

namespace fp::db {
class Datastore;
}  // namespace fp::db

namespace fp::app {

// What the record of (token, key) says a request with a given hash gets.
struct KeyRecall {
  enum class Outcome {
    kRun,           // no record (or a saga that unwound with a 5xx, now forgotten): run it
    kOtherRequest,  // the key records another request
    kAnswer,        // `answer` is the stored answer
    kSagaRunning,   // the saga carrying the request runs (or unwinds) still
    kSagaDone,      // the saga finished: rebuild the answer from `params` and `output`
    kSagaFailed,    // the saga unwound with a 4xx or is stuck: `error` is the answer
    kSagaPruned,    // the saga's history was pruned before its answer was recorded
  };
  Outcome outcome = Outcome::kRun;
  KeyAnswer answer;                                  // kAnswer
  nlohmann::json params = nlohmann::json::object();  // kSagaDone: the saga's parameters
  nlohmann::json output;                             // kSagaDone: its last node's output
  Error error = Error::Internal("");                 // kSagaFailed
};

// Thread-safe.
class Idempotency {
 public:
  explicit Idempotency(db::Datastore& ds) : ds_(ds) {}

  // The hash a request is recognised by under its key.
  static std::string RequestHash(const std::string& request);

  // Reads the record of (token, key) for a request with `request_sha256`. A saga that unwound
  // with a 5xx error undid its effect: its link is forgotten and the outcome is kRun. Errors:
  // the datastore's.
  Result<KeyRecall> Recall(const Uuid& token_id, const std::string& key,
                           const std::string& request_sha256);

  // Stores the answer of a request whose effect is already recorded or never happened
  // (db::IdempotencyFinish). A record of another request under the key is left alone.
  Status Finish(const Uuid& token_id, const std::string& key, const std::string& request_sha256,
                const KeyAnswer& answer);

 private:
  db::Datastore& ds_;
};

}  // namespace fp::app
