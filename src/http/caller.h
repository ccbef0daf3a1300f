#pragma once

// Where a client's requests go: an HTTP peer over a socket (HttpClient, http/client.h), or the
// deterministic simulation's network (src/sim/), which hands the same requests to an agent's
// handlers in process. The agents' clients (agents/agents.h) speak through one.

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"

namespace fp::http {

// What a peer answered: any status, 2xx or not.
struct HttpAnswer {
  int status = 0;
  std::string body;
};

// A call sent and not yet answered (Caller::Start).
class PendingCall {
 public:
  virtual ~PendingCall() = default;
  // Waits for the answer: Call's answer and errors. Once.
  virtual Result<HttpAnswer> Finish() = 0;
};

class Caller {
 public:
  virtual ~Caller() = default;

  // Sends `method target` with `body` (application/json when not empty) and `headers`; the
  // answer whatever its status. ServiceUnavailable naming the peer when no answer came (a
  // timeout says so: IsTimeout), the peer refused, or the call was abandoned.
  virtual Result<HttpAnswer> Call(
      std::string_view method, std::string_view target, std::string_view body = {},
      const std::vector<std::pair<std::string, std::string>>& headers = {}) = 0;
  // Call in two steps: the request is sent, and the answer is read at Finish, so that the caller
  // works meanwhile (calls another peer) while this peer works on it. The deadline counts from
  // here; `body` must stay valid until Finish. A PendingCall dropped without Finish ends the
  // call. By default (a peer that is not a socket) the whole call is made here.
  virtual std::unique_ptr<PendingCall> Start(
      std::string_view method, std::string_view target, std::string_view body = {},
      const std::vector<std::pair<std::string, std::string>>& headers = {});
  // Ends every call in progress and every later one (ServiceUnavailable). Thread-safe.
  virtual void Abandon() = 0;
  virtual const std::string& base_url() const = 0;
  // "<peer> at <url>", the prefix of every message about this peer.
  virtual const std::string& description() const = 0;
};

namespace caller_detail {
class Answered final : public PendingCall {
 public:
  explicit Answered(Result<HttpAnswer> answer) : answer_(std::move(answer)) {}
  Result<HttpAnswer> Finish() override { return std::move(answer_); }

 private:
  Result<HttpAnswer> answer_;
};
}  // namespace caller_detail

inline std::unique_ptr<PendingCall> Caller::Start(
    std::string_view method, std::string_view target, std::string_view body,
    const std::vector<std::pair<std::string, std::string>>& headers) {
  return std::make_unique<caller_detail::Answered>(Call(method, target, body, headers));
}

// The words of a timeout's message: "<peer> at <url> did not answer within <ms> ms".
inline constexpr std::string_view kDidNotAnswerWithin = " did not answer within ";

// Whether `e` is a Call's timeout error (the peer did not answer within the deadline), as
// opposed to a refusal or an answer: a caller may then avoid calling a peer it just found hung.
inline bool IsTimeout(const Error& e) {
  return e.kind() == ErrorKind::kServiceUnavailable &&
         e.message().find(kDidNotAnswerWithin) != std::string::npos;
}

}  // namespace fp::http
