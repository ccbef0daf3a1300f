#pragma once

// A request as the services see it: who makes it, and what the commit of its effect records
// with it (its Idempotency-Key's answer and its audit entry: db/request_effect.h). The API
// makes one per mutating request and passes it, as an argument, to the service method, which
// passes it to the one write or saga creation that carries the effect. Nothing about a request
// travels any other way (no thread-local, no global).

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "app/actor.h"
#include "common/time.h"
#include "common/uuid.h"

namespace fp::db {
class RequestEffect;
}  // namespace fp::db

namespace fp::app {

// An answer as stored under a key: HTTP status and body (empty for 204).
struct KeyAnswer {
  int status = 0;
  std::string body;
};

// A mutating request: the acting token, and what its effect's commit records. `effect` is
// null for work that no request carries (background tasks, tests): then nothing is recorded.
struct RequestContext {
  const Actor& actor;
  db::RequestEffect* effect = nullptr;
};

// A request whose effect is one write returning a `T`: `render` turns the write's result into
// the answer the same commit records (the API's status and view of it).
template <typename T>
struct Request : RequestContext {
  std::function<KeyAnswer(const T&)> render;
};

// The request of work that no API request carries (tests, tools): nothing is recorded with its
// effect. Converts to whichever request a service method takes.
struct Unrecorded {
  const Actor& actor;
  operator RequestContext() const { return RequestContext{actor, nullptr}; }  // NOLINT
  template <typename T>
  operator Request<T>() const {  // NOLINT
    return Request<T>{{actor, nullptr}, nullptr};
  }
};

// What a request is, as its audit entry says, known when it arrives.
struct RequestFacts {
  std::string request_id;
  std::string request_uri;
  std::string operation_id;
  std::string source_ip;
  std::optional<std::string> user_agent;
  Timestamp time_started = 0;
};

// A request's Idempotency-Key, as its record is keyed.
struct RequestKey {
  Uuid token_id;
  std::string key;
  std::string request_sha256;
};

// One request's record in the making (db::RequestEffect), owned by the API for the request's
// run. Made by Audit::Begin.
class RequestRecord {
 public:
  enum class Outcome {
    kNone,      // nothing committed for the request yet
    kAnswered,  // a write committed the answer `answer()` with its effect
    kSaga,      // a saga was created for the request
    kTaken,     // another request recorded the key first; this one's write was rolled back
  };

  explicit RequestRecord(std::unique_ptr<db::RequestEffect> effect);
  ~RequestRecord();
  RequestRecord(const RequestRecord&) = delete;
  RequestRecord& operator=(const RequestRecord&) = delete;

  db::RequestEffect* effect() { return effect_.get(); }
  Outcome outcome() const;
  KeyAnswer answer() const;  // kAnswered
  // The status the request answers when the saga carrying it succeeds (201, 202, 204), which
  // the saga's end records in the entry.
  void AnswerSagaWith(int status);
  // The request is answered from its Idempotency-Key's record (a replay, which may still do
  // what the first request left undone): what it writes links nothing to the key.
  void ReplayFromKey();

 private:
  std::unique_ptr<db::RequestEffect> effect_;
};

}  // namespace fp::app
