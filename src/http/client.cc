// With the server's files (server.cc, event_loop.cc, workers.cc, response.cc), the only
// translation units that include Boost.Beast. Blocking
// sockets with poll()-bounded waits: a call does its I/O on the calling thread.

#include "http/client.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <cstring>
#include <set>
#include <vector>

#include "common/mutex.h"
#include "http/host_port.h"
#include "http/socket_io.h"

namespace fp::http {

namespace beast = boost::beast;
namespace beast_http = beast::http;

// Named, not anonymous: HttpClient::Impl holds these types.
namespace client_impl {

// Agents answer with at most a full NAT table (100,000 entries is about 15 MB of JSON).
constexpr uint64_t kAnswerBodyLimit = 256ull << 20;
// Idle keep-alive connections kept per client; more concurrent calls open more, and the
// surplus is closed when they finish.
constexpr size_t kMaxIdleConnections = 8;
// The text of the timeout error, between the peer's description and the deadline.

struct PeerAddress {
  std::string host;  // without brackets
  std::string port;
  std::string host_header;
};

Result<PeerAddress> ParseBaseUrl(std::string_view url, std::string_view description) {
  auto malformed = [&] {
    return Fail(Error::Internal(
        fmt::format("{}: the address is not of the form http://HOST:PORT", description)));
  };
  constexpr std::string_view kScheme = "http://";
  if (url.substr(0, kScheme.size()) != kScheme) return malformed();
  std::string_view rest = url.substr(kScheme.size());
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.empty() || rest.find('/') != std::string_view::npos) return malformed();
  auto address = ParseHostPort(rest, 80);
  if (!address || address->host.empty()) return malformed();
  PeerAddress out;
  out.host = std::move(address->host);
  out.port = std::to_string(address->port);
  out.host_header = std::string(rest);
  return out;
}

// One connection (a non-blocking socket). Used by one call at a time.
struct Connection {
  int fd = -1;
  beast::flat_buffer buffer;
  bool reused = false;
  Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() {
    if (fd >= 0) ::close(fd);
  }
};

// True when a send or receive failure on a reused keep-alive connection means the peer had
// closed it before it saw our request; the call is then repeated once on a fresh connection.
bool IsStaleErrno(int e) { return e == EPIPE || e == ECONNRESET || e == ECONNABORTED; }

// Connects to one address within the deadline. The socket's descriptor, or -1 with errno set.
int ConnectOne(const Clock& clock, const sockaddr* addr, socklen_t len, MonoTime deadline) {
  int fd = ::socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, addr, len) != 0) {
    int err = errno;
    if (err == EINPROGRESS) {
      if (!socket_io::WaitReady(clock, fd, POLLOUT, deadline)) {
        err = errno;
      } else {
        socklen_t err_len = sizeof err;
        if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len) != 0) err = errno;
      }
    }
    if (err != 0) {
      ::close(fd);
      errno = err;
      return -1;
    }
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

}  // namespace client_impl

using namespace client_impl;

struct HttpClient::Impl {
  std::string peer;
  std::string base_url;
  std::string description;
  std::chrono::milliseconds timeout;
  std::string authorization;
  Result<PeerAddress> address;
  const Clock& clock;

  Mutex mu;
  std::vector<std::unique_ptr<Connection>> idle FP_GUARDED_BY(mu);
  std::set<int> busy FP_GUARDED_BY(mu);  // sockets of calls under way
  bool abandoned FP_GUARDED_BY(mu) = false;

  Impl(std::string peer_name, std::string url, std::chrono::milliseconds call_timeout,
       std::string authorization_header, const Clock& call_clock)
      : peer(std::move(peer_name)),
        base_url(std::move(url)),
        description(fmt::format("{} at {}", peer, base_url)),
        timeout(call_timeout),
        authorization(std::move(authorization_header)),
        address(ParseBaseUrl(base_url, description)),
        clock(call_clock) {}

  Error Abandoned() const {
    return Error::Unavailable(fmt::format("{}: the call was abandoned", description));
  }
  // Marks `fd` as in a call, unless the client was abandoned (false).
  bool BeginCall(int fd) {
    MutexLock lock(mu);
    if (abandoned) return false;
    busy.insert(fd);
    return true;
  }
  void EndCall(int fd) {
    MutexLock lock(mu);
    busy.erase(fd);
  }

  Error TimedOut() const {
    return Error::Unavailable(
        fmt::format("{}{}{} ms", description, kDidNotAnswerWithin, timeout.count()));
  }
  Error Unreachable(std::string_view what, std::string_view why) const {
    return Error::Unavailable(fmt::format("{}: {}: {}", description, what, why));
  }
  // The error for a failed step: a timeout, or the peer's failure with errno `err`.
  Error StepFailed(std::string_view what, int err) const {
    return err == ETIMEDOUT ? TimedOut() : Unreachable(what, std::strerror(err));
  }

  std::unique_ptr<Connection> TakeIdle() {
    MutexLock lock(mu);
    if (idle.empty()) return nullptr;
    auto conn = std::move(idle.back());
    idle.pop_back();
    return conn;
  }

  void ReturnIdle(std::unique_ptr<Connection> conn) {
    conn->reused = true;
    MutexLock lock(mu);
    if (idle.size() < kMaxIdleConnections) idle.push_back(std::move(conn));
  }

  Result<std::unique_ptr<Connection>> Connect(MonoTime deadline) {
    // A numeric address needs no resolver; a name is resolved by getaddrinfo, which the
    // deadline cannot cut short (see the header).
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    int rc = ::getaddrinfo(address->host.c_str(), address->port.c_str(), &hints, &found);
    if (rc != 0) {
      return Fail(Unreachable("cannot resolve " + address->host, ::gai_strerror(rc)));
    }
    auto conn = std::make_unique<Connection>();
    int err = ECONNREFUSED;
    for (addrinfo* a = found; a != nullptr && conn->fd < 0; a = a->ai_next) {
      conn->fd = ConnectOne(clock, a->ai_addr, a->ai_addrlen, deadline);
      if (conn->fd < 0) err = errno;
    }
    ::freeaddrinfo(found);
    if (conn->fd < 0) return Fail(StepFailed("cannot connect", err));
    return conn;
  }

  // Sends a request on `conn`. `stale` is set when a reused connection turned out to be closed
  // by the peer before it read the request.
  Status Send(Connection& conn, std::string_view head, std::string_view body, MonoTime deadline,
              bool& stale) {
    stale = false;
    if (!socket_io::SendAll(clock, {.fd = conn.fd}, head, deadline) ||
        (!body.empty() && !socket_io::SendAll(clock, {.fd = conn.fd}, body, deadline))) {
      int err = errno;
      stale = conn.reused && IsStaleErrno(err);
      return Fail(StepFailed("connection lost while sending the request", err));
    }
    return Ok();
  }

  // Reads the answer to the request sent on `conn`; `stale` as Send's.
  Result<HttpAnswer> Receive(Connection& conn, MonoTime deadline, bool& stale, bool& keep_alive) {
    stale = false;
    beast_http::response_parser<beast_http::string_body> parser;
    parser.body_limit(kAnswerBodyLimit);
    beast::error_code ec;
    switch (socket_io::ReadMessage(clock, {.fd = conn.fd}, conn.buffer, parser, deadline, ec)) {
      case socket_io::ReadOutcome::kMessage:
        break;
      case socket_io::ReadOutcome::kTimedOut:
        return Fail(TimedOut());
      case socket_io::ReadOutcome::kClosed:
        stale = conn.reused && !parser.got_some();
        return Fail(Unreachable("no valid answer", "the connection was closed"));
      case socket_io::ReadOutcome::kMalformed:
        return Fail(Unreachable("no valid answer", ec.message()));
    }
    auto& response = parser.get();
    keep_alive = response.keep_alive();
    return HttpAnswer{static_cast<int>(response.result_int()), std::move(response.body())};
  }
};

namespace client_impl {

// One call: sent when made (HttpClient::Start), answered by Finish. A reused connection the peer
// had closed, found so while sending or by an answer that never began, is replaced once by a new
// one and the request sent again, within the same deadline.
class HttpPendingCall final : public PendingCall {
 public:
  HttpPendingCall(HttpClient::Impl& impl, std::string head, std::string_view rest,
                  MonoTime deadline)
      : impl_(impl), head_(std::move(head)), rest_(rest), deadline_(deadline) {
    sent_ = SendRequest();
  }
  ~HttpPendingCall() override { Drop(); }

  Result<HttpAnswer> Finish() override {
    if (!sent_) return Fail(sent_.error());
    if (!conn_) {
      return Fail(Error::Internal(fmt::format("{}: a call was finished twice", impl_.description)));
    }
    for (;;) {
      bool stale = false;
      bool keep_alive = false;
      auto answer = impl_.Receive(*conn_, deadline_, stale, keep_alive);
      if (answer) {
        // Before the connection can be closed or reused: Abandon shuts down only sockets
        // still open.
        impl_.EndCall(conn_->fd);
        if (keep_alive) {
          impl_.ReturnIdle(std::move(conn_));
        } else {
          conn_.reset();
        }
        return answer;
      }
      Drop();
      if (!stale) return answer;
      FP_CHECK_OK(SendRequest());
    }
  }

 private:
  // Takes or opens a connection and sends the request on it.
  Status SendRequest() {
    if (!conn_) conn_ = impl_.TakeIdle();
    for (;;) {
      if (!conn_) conn_ = FP_TRY(impl_.Connect(deadline_));
      if (!impl_.BeginCall(conn_->fd)) {
        conn_.reset();
        return Fail(impl_.Abandoned());
      }
      bool stale = false;
      Status sent = impl_.Send(*conn_, head_, rest_, deadline_, stale);
      if (sent) return Ok();
      Drop();
      if (!stale) return sent;
    }
  }

  // Ends the call on its connection, which is closed (an answer may be on its way).
  void Drop() {
    if (!conn_) return;
    impl_.EndCall(conn_->fd);
    conn_.reset();
  }

  HttpClient::Impl& impl_;
  const std::string head_;
  const std::string_view rest_;
  const MonoTime deadline_;
  std::unique_ptr<Connection> conn_;
  Status sent_ = Ok();
};

}  // namespace client_impl

HttpClient::HttpClient(std::string peer, std::string base_url, std::chrono::milliseconds timeout,
                       std::string authorization, const Clock* clock)
    : impl_(std::make_unique<Impl>(std::move(peer), std::move(base_url), timeout,
                                   std::move(authorization),
                                   clock != nullptr ? *clock : MachineClock())) {}

HttpClient::~HttpClient() = default;

void HttpClient::Abandon() {
  MutexLock lock(impl_->mu);
  impl_->abandoned = true;
  // The calls' poll()s wake with the socket closed for reading, and their callers get an
  // error (not retried as a stale connection: BeginCall refuses from now on).
  for (int fd : impl_->busy) ::shutdown(fd, SHUT_RDWR);
  impl_->idle.clear();
}

const std::string& HttpClient::base_url() const { return impl_->base_url; }
const std::string& HttpClient::description() const { return impl_->description; }

Result<HttpAnswer> HttpClient::Call(
    std::string_view method, std::string_view target, std::string_view body,
    const std::vector<std::pair<std::string, std::string>>& headers) {
  return Start(method, target, body, headers)->Finish();
}

std::unique_ptr<PendingCall> HttpClient::Start(
    std::string_view method, std::string_view target, std::string_view body,
    const std::vector<std::pair<std::string, std::string>>& headers) {
  auto failed = [](Error e) {
    return std::make_unique<caller_detail::Answered>(Fail(std::move(e)));
  };
  Impl& impl = *impl_;
  if (!impl.address) return failed(impl.address.error());
  auto deadline = impl.clock.Deadline(impl.timeout);

  beast_http::verb verb = beast_http::string_to_verb(method);
  if (verb == beast_http::verb::unknown) {
    return failed(
        Error::Internal(fmt::format("{}: unknown HTTP method {}", impl.description, method)));
  }
  // The request's head written directly; a small body joins it (one send), a large one (a
  // switch's whole NAT table) is sent from where it lies, never copied.
  constexpr size_t kJoinedBody = 16 << 10;
  const bool sends_body = !body.empty() || verb == beast_http::verb::post ||
                          verb == beast_http::verb::put || verb == beast_http::verb::patch;
  std::string head;
  head.reserve(192 + impl.authorization.size() + (body.size() <= kJoinedBody ? body.size() : 0));
  auto out = std::back_inserter(head);
  fmt::format_to(out, "{} {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: floatplane\r\n", method, target,
                 impl.address->host_header);
  if (!impl.authorization.empty()) fmt::format_to(out, "Authorization: {}\r\n", impl.authorization);
  if (!body.empty()) head += "Content-Type: application/json\r\n";
  if (sends_body) fmt::format_to(out, "Content-Length: {}\r\n", body.size());
  for (const auto& [name, value] : headers) {
    if (name.find_first_of("\r\n:") != std::string::npos ||
        value.find_first_of("\r\n") != std::string::npos) {
      return failed(Error::Internal(
          fmt::format("{}: header {} is not a valid HTTP header", impl.description, name)));
    }
    fmt::format_to(out, "{}: {}\r\n", name, value);
  }
  head += "\r\n";
  std::string_view rest = body;
  if (body.size() <= kJoinedBody) {
    head += body;
    rest = {};
  }

  return std::make_unique<HttpPendingCall>(impl, std::move(head), rest, deadline);
}

}  // namespace fp::http
