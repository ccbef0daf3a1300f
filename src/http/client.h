#pragma once

// A small synchronous HTTP/1.1 client for talking to one dataplane agent. Beast stays inside
// client.cc so that only it and the HTTP server pay its compile time.

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/error.h"
#include "http/caller.h"

namespace fp::http {

namespace client_impl {
class HttpPendingCall;
}  // namespace client_impl

// Sends requests to the server at `base_url` ("http://HOST:PORT", HOST a name, an IPv4
// address or a bracketed IPv6 address; a trailing "/" is accepted). Connections are kept alive
// and reused between calls; a reused connection that the peer closed in the meantime is
// replaced once, transparently, within the same deadline.
//
// Thread-safe: concurrent calls use separate connections.
class HttpClient final : public Caller {
 public:
  // `peer` names the server in error messages ("switch agent"). Never fails: a malformed
  // `base_url` is reported by every Call. `authorization`, if not empty, is sent as the
  // Authorization header of every call (never logged). `clock`: whose time the timeout is
  // measured in (unset: MachineClock); must outlive the client.
  HttpClient(std::string peer, std::string base_url, std::chrono::milliseconds timeout,
             std::string authorization = {}, const Clock* clock = nullptr);
  ~HttpClient() override;
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Sends `method target` (target is the path and query, e.g. "/nat") with `body` as
  // application/json when non-empty, and returns the answer whatever its status.
  // The whole call (resolve, connect, write, read) has one deadline of `timeout`, except that
  // resolving a host name (getaddrinfo) cannot be cut short: name agents by IP address where
  // the deadline must be hard.
  // Errors, all naming the peer and its URL:
  //  - ServiceUnavailable `<peer> at <url> did not answer within <timeout> ms` on timeout;
  //  - ServiceUnavailable `<peer> at <url>: <reason>` when the peer cannot be resolved or
  //    reached, refuses the connection, closes it before answering or answers something that
  //    is not HTTP;
  //  - Internal `<peer> at <url>: ...` for a malformed base URL.
  // `headers` are sent as given, after the client's own (Host, User-Agent, Content-Type).
  Result<HttpAnswer> Call(
      std::string_view method, std::string_view target, std::string_view body = {},
      const std::vector<std::pair<std::string, std::string>>& headers = {}) override;

  // Call's request sent now, its answer read at Finish (Caller::Start).
  std::unique_ptr<PendingCall> Start(
      std::string_view method, std::string_view target, std::string_view body = {},
      const std::vector<std::pair<std::string, std::string>>& headers = {}) override;

  // Ends every call in progress at once (each fails with ServiceUnavailable `<peer> at <url>:
  // the call was abandoned`), and every later call likewise: for an owner that is stopping
  // while a thread of its waits on a long call. Thread-safe; permanent.
  void Abandon() override;

  const std::string& base_url() const override;
  const std::string& description() const override;

 private:
  friend class client_impl::HttpPendingCall;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp::http
