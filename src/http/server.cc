// The HTTP server: Beast parses and serializes, plain POSIX sockets carry the bytes.
//
// Admission. One event-loop thread owns every connection that waits for (the rest of) a
// request: it accepts, reads without blocking, and enforces the request and idle deadlines. A
// connection reaches a worker thread only with a complete request, so a client that trickles
// its request, or opens thousands of connections and says nothing, holds descriptors but no
// thread, and is cut off at the request deadline. Connections beyond the bounds (in all, and
// per client address) get a 503 with Retry-After instead of a silent close.
//
// Speed. The worker that answered a request waits a few milliseconds (`linger`) for the same
// connection's next request and serves it directly: a busy keep-alive client then costs no
// hand-off between threads, which on a small machine is worth more than the handler itself
// (the thread-per-connection server this replaced was chosen for that reason). Handlers block
// (on the database, on agents), so workers are threads, started as needed up to max_workers.

#include "http/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/log.h"
#include "common/uuid.h"
#include "http/socket_io.h"

namespace fp::http {

namespace beast = boost::beast;
namespace beast_http = beast::http;

std::string HttpRequest::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return v;
  }
  return {};
}

namespace {

using socket_io::ParseOutcome;
using socket_io::ReadOutcome;
using socket_io::SteadyClock;
using TimePoint = SteadyClock::time_point;
using Parser = beast_http::request_parser<beast_http::string_body>;

std::string ErrorBody(std::string_view request_id, std::string_view code, std::string_view msg) {
  nlohmann::json j = {{"request_id", request_id}, {"error_code", code}, {"message", msg}};
  return j.dump();
}

// A whole error response, for answers the event loop sends itself (before or instead of a
// handler): a fresh request id, "Connection: close", and Retry-After for 503.
std::string ErrorWire(int status, std::string_view code, std::string_view message) {
  std::string request_id = Uuid::Random().ToString();
  beast_http::response<beast_http::string_body> res;
  res.result(static_cast<unsigned>(status));
  res.set(beast_http::field::content_type, "application/json");
  res.set("x-request-id", request_id);
  if (status == 503) res.set(beast_http::field::retry_after, "1");
  res.keep_alive(false);
  res.body() = ErrorBody(request_id, code, message);
  res.prepare_payload();
  std::ostringstream wire;
  wire << res;
  return std::move(wire).str();
}

// The address a client's connections are counted under: the IPv4 address, or the /64 of an
// IPv6 address (one host commonly holds a whole /64).
std::string ClientKey(const sockaddr_storage& peer) {
  char text[INET6_ADDRSTRLEN] = {};
  if (peer.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&peer)->sin_addr, text, sizeof text);
    return text;
  }
  if (peer.ss_family == AF_INET6) {
    in6_addr prefix = reinterpret_cast<const sockaddr_in6*>(&peer)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&prefix)) {
      ::inet_ntop(AF_INET, &prefix.s6_addr[12], text, sizeof text);
      return text;
    }
    std::memset(&prefix.s6_addr[8], 0, 8);
    ::inet_ntop(AF_INET6, &prefix, text, sizeof text);
    return std::string(text) + "/64";
  }
  return "unknown";
}

// A client connection. Owned by exactly one of: the event loop (waiting for a request), the
// work queue, or a worker (its request being handled).
struct Conn {
  uint64_t id = 0;
  int fd = -1;
  std::string client;
  beast::flat_buffer buffer;
  std::optional<Parser> parser;
  beast::error_code parse_error;           // set when the request could not be read as HTTP
  std::optional<TimePoint> request_began;  // the first byte of the request being read
  TimePoint idle_since;                    // when it was accepted or last answered
  TimePoint queued_at;                     // when its complete request joined the queue
  bool answered_any = false;               // a first request must come within the request timeout

  void NextRequest(const HttpServerOptions& options) {
    parser.emplace();
    parser->header_limit(static_cast<uint32_t>(options.header_limit));
    parser->body_limit(options.body_limit);
    parse_error = {};
    request_began.reset();
    idle_since = SteadyClock::now();
  }
  bool HasPartialRequest() const { return buffer.size() > 0 || parser->got_some(); }
};

// Event-loop tags: connection ids start at kFirstConnId; draining descriptors carry kDrainBit.
constexpr uint64_t kListenTag = 1;
constexpr uint64_t kWakeTag = 2;
constexpr uint64_t kFirstConnId = 16;
constexpr uint64_t kDrainBit = uint64_t{1} << 63;
constexpr auto kSweepPeriod = std::chrono::milliseconds(250);
// How long a refused connection may take to send its request before it is closed: reading it
// lets the client see the 503 instead of a reset.
constexpr auto kDrainTime = std::chrono::seconds(1);
constexpr int kMinWorkers = 4;

class EventServer final : public HttpServer {
 public:
  EventServer(HttpServerOptions options, HttpHandler handler)
      : options_(std::move(options)), handler_(std::move(handler)) {}

  ~EventServer() override {
    Stop();
    for (int fd : {listen_fd_, epoll_fd_, wake_fd_}) {
      if (fd >= 0) ::close(fd);
    }
  }

  Status Bind() {
    FitToDescriptorLimit();
    sockaddr_storage addr{};
    socklen_t len = 0;
    const std::string& host = options_.host;
    auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
    if (::inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
      v4->sin_family = AF_INET;
      v4->sin_port = htons(options_.port);
      len = sizeof *v4;
    } else if (::inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
      v6->sin6_family = AF_INET6;
      v6->sin6_port = htons(options_.port);
      len = sizeof *v6;
    } else {
      return Fail(Error::InvalidRequest(
          fmt::format("invalid listen address \"{}\": not an IPv4 or IPv6 address", host)));
    }
    auto fail = [&](const char* what) {
      return Fail(Error::Internal(fmt::format("cannot listen on {}:{}: {}: {}", host, options_.port,
                                              what, std::strerror(errno))));
    };
    listen_fd_ = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (listen_fd_ < 0) return fail("socket");
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0) return fail("bind");
    if (::listen(listen_fd_, SOMAXCONN) != 0) return fail("listen");
    sockaddr_storage bound{};
    socklen_t bound_len = sizeof bound;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &bound_len);
    port_ = ntohs(bound.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                                             : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
    epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd_ < 0) return fail("epoll_create1");
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd_ < 0) return fail("eventfd");
    if (!Watch(listen_fd_, kListenTag, EPOLL_CTL_ADD) ||
        !Watch(wake_fd_, kWakeTag, EPOLL_CTL_ADD)) {
      return fail("epoll_ctl");
    }
    loop_ = std::thread([this] { Loop(); });
    return Ok();
  }

  uint16_t port() const override { return port_; }
  const HttpServerOptions& options() const override { return options_; }

  HttpServerStats stats() const override {
    HttpServerStats s;
    {
      std::lock_guard lock(mu_);
      s.open_connections = open_;
    }
    s.refused_over_capacity = refused_over_capacity_.load();
    s.refused_per_client = refused_per_client_.load();
    s.refused_busy = refused_busy_.load();
    s.request_timeouts = request_timeouts_.load();
    return s;
  }

  void Stop() override {
    if (stopped_.exchange(true) || !loop_.joinable()) return;
    // The loop stops accepting and closes every connection that waits for a request; busy ones
    // answer theirs ("Connection: close") and end.
    stopping_ = true;
    Wake();
    loop_.join();
    // No connection may complete in the backlog that nobody will accept.
    ::close(listen_fd_);
    listen_fd_ = -1;
    std::unique_lock lock(mu_);
    if (!idle_cv_.wait_for(lock, std::chrono::seconds(10),
                           [&] { return queue_.empty() && busy_fds_.empty(); })) {
      // Still busy after 10 s (a peer that stops reading, a slow handler): cut the sockets, so
      // that sends fail at once; the handlers themselves must still return.
      for (int fd : busy_fds_) ::shutdown(fd, SHUT_RDWR);
      for (auto& conn : queue_) CloseLocked(*conn);
      queue_.clear();
    }
    workers_exit_ = true;
    work_cv_.notify_all();
    std::map<uint64_t, std::thread> workers = std::move(workers_);
    lock.unlock();
    for (auto& [id, t] : workers) t.join();
  }

 private:
  // Leaves room under the descriptor limit for the datastore, agent connections and refused
  // connections being drained.
  void FitToDescriptorLimit() {
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return;
    int64_t budget = static_cast<int64_t>(limit.rlim_cur) - 256;
    int64_t connections = std::max<int64_t>(64, budget * 3 / 4);
    max_draining_ = static_cast<size_t>(std::max<int64_t>(16, budget / 4));
    if (connections < options_.max_connections) {
      // The default is meant to be lowered so (as the flag's help says); only a bound the
      // operator chose deserves a warning.
      if (options_.max_connections != HttpServerOptions{}.max_connections) {
        LogEvent("warn", "max_connections lowered to fit the descriptor limit",
                 {{"max_connections", connections},
                  {"requested", options_.max_connections},
                  {"descriptor_limit", static_cast<int64_t>(limit.rlim_cur)}});
      }
      options_.max_connections = static_cast<int>(connections);
    }
  }

  bool Watch(int fd, uint64_t tag, int op) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag;
    return ::epoll_ctl(epoll_fd_, op, fd, &ev) == 0;
  }

  void Wake() {
    uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
  }

  // ---- the event loop ----

  void Loop() {
    epoll_event events[256];
    TimePoint next_sweep = SteadyClock::now() + kSweepPeriod;
    while (!stopping_) {
      int n = ::epoll_wait(epoll_fd_, events, 256, socket_io::MillisLeft(next_sweep));
      if (n < 0 && errno != EINTR) {
        LogEvent("error", "epoll_wait failed; the server stops accepting",
                 {{"error", std::strerror(errno)}});
        break;
      }
      for (int i = 0; i < n; ++i) {
        uint64_t tag = events[i].data.u64;
        if (tag == kListenTag) {
          AcceptAll();
        } else if (tag == kWakeTag) {
          uint64_t count;
          (void)!::read(wake_fd_, &count, sizeof count);
          TakeReturned();
        } else if (tag & kDrainBit) {
          DrainSome(static_cast<int>(tag & ~kDrainBit));
        } else {
          OnReadable(tag);
        }
      }
      if (SteadyClock::now() >= next_sweep) {
        Sweep();
        next_sweep = SteadyClock::now() + kSweepPeriod;
      }
    }
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
    for (auto& [id, conn] : parked_) Close(*conn);
    parked_.clear();
    {
      // From now on workers close the connections they would hand back (also after an
      // epoll_wait failure, when nothing would take them).
      std::lock_guard lock(mu_);
      loop_done_ = true;
      for (auto& conn : returned_) CloseLocked(*conn);
      returned_.clear();
    }
    for (auto& [fd, deadline] : draining_) ::close(fd);
    draining_.clear();
  }

  void AcceptAll() {
    for (int accepted = 0; accepted < 256; ++accepted) {
      sockaddr_storage peer{};
      socklen_t len = sizeof peer;
      int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len,
                         SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          // Out of descriptors or memory: the connection stays queued, and a level-triggered
          // listen socket would wake the loop at once again. Stop watching it until the sweep.
          ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
          accept_paused_ = true;
          LogEvent("warn", "cannot accept connections", {{"error", std::strerror(errno)}});
        }
        return;
      }
      std::string client = ClientKey(peer);
      std::optional<std::string> refusal;
      {
        std::lock_guard lock(mu_);
        int& from_client = per_client_[client];
        if (open_ >= options_.max_connections) {
          refusal = fmt::format("the server is at its limit of {} open connections; retry later",
                                options_.max_connections);
          ++refused_over_capacity_;
        } else if (from_client >= options_.max_connections_per_client) {
          refusal = fmt::format(
              "too many open connections from {} (limit {}); close idle connections or reuse "
              "them, then retry",
              client, options_.max_connections_per_client);
          ++refused_per_client_;
        } else {
          ++open_;
          ++from_client;
        }
        if (from_client == 0) per_client_.erase(client);
      }
      if (refusal) {
        RefuseAndDrain(fd, ErrorWire(503, "ServiceUnavailable", *refusal));
        continue;
      }
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto conn = std::make_unique<Conn>();
      conn->id = next_id_++;
      conn->fd = fd;
      conn->client = std::move(client);
      conn->NextRequest(options_);
      Park(std::move(conn));
    }
  }

  // Sends `wire` (small: it fits a fresh socket's buffer), ends the sending side, and reads
  // what the client still sends for a moment, so that closing does not reset the connection
  // before the client has read the answer.
  void RefuseAndDrain(int fd, const std::string& wire) {
    (void)!::send(fd, wire.data(), wire.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::shutdown(fd, SHUT_WR);
    if (draining_.size() >= max_draining_ ||
        !Watch(fd, kDrainBit | static_cast<uint64_t>(fd), EPOLL_CTL_ADD)) {
      ::close(fd);
      return;
    }
    draining_[fd] = SteadyClock::now() + kDrainTime;
  }

  void DrainSome(int fd) {
    char scratch[4096];
    for (;;) {
      ssize_t n = ::recv(fd, scratch, sizeof scratch, MSG_DONTWAIT);
      if (n > 0) continue;
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      break;
    }
    ::close(fd);  // closing removes it from the epoll set
    draining_.erase(fd);
  }

  // The loop takes the connection and waits for its next request.
  void Park(std::unique_ptr<Conn> conn) {
    if (!Watch(conn->fd, conn->id, EPOLL_CTL_ADD)) {
      Close(*conn);
      return;
    }
    uint64_t id = conn->id;
    parked_[id] = std::move(conn);
  }

  void TakeReturned() {
    std::vector<std::unique_ptr<Conn>> back;
    {
      std::lock_guard lock(mu_);
      back.swap(returned_);
    }
    for (auto& conn : back) Park(std::move(conn));
  }

  void OnReadable(uint64_t id) {
    auto it = parked_.find(id);
    if (it == parked_.end()) return;
    Conn& c = *it->second;
    // At most 128 KiB per wake-up, so one fast sender cannot hold the loop; level-triggered
    // epoll reports the rest next round.
    for (int round = 0; round < 8; ++round) {
      auto space = c.buffer.prepare(16 << 10);
      ssize_t n = ::recv(c.fd, space.data(), space.size(), MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) {
        // Closed or reset; a request cut off here is not answered (nobody would read it).
        ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
        Close(c);
        parked_.erase(it);
        return;
      }
      c.buffer.commit(static_cast<size_t>(n));
      if (!c.request_began) c.request_began = SteadyClock::now();
      if (socket_io::ParseBuffered(c.buffer, *c.parser, c.parse_error) != ParseOutcome::kNeedMore) {
        std::unique_ptr<Conn> conn = std::move(it->second);
        parked_.erase(it);
        ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, conn->fd, nullptr);
        Dispatch(std::move(conn));
        return;
      }
    }
  }

  // Closes connections past their deadline: a request still incomplete at the request deadline
  // gets 408; a connection idle past the idle timeout is closed silently.
  void Sweep() {
    TimePoint now = SteadyClock::now();
    for (auto it = parked_.begin(); it != parked_.end();) {
      Conn& c = *it->second;
      bool partial = c.HasPartialRequest();
      TimePoint deadline = partial && c.request_began ? *c.request_began + options_.request_timeout
                           : c.answered_any           ? c.idle_since + options_.idle_timeout
                                                      : c.idle_since + options_.request_timeout;
      if (now < deadline) {
        ++it;
        continue;
      }
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
      if (partial) {
        ++request_timeouts_;
        std::string wire =
            ErrorWire(408, "RequestTimeout",
                      fmt::format("the request did not arrive completely within {} ms",
                                  options_.request_timeout.count()));
        (void)!::send(c.fd, wire.data(), wire.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      Close(c);
      it = parked_.erase(it);
    }
    for (auto it = draining_.begin(); it != draining_.end();) {
      if (now < it->second) {
        ++it;
        continue;
      }
      ::close(it->first);
      it = draining_.erase(it);
    }
    if (accept_paused_ && Watch(listen_fd_, kListenTag, EPOLL_CTL_ADD)) accept_paused_ = false;
    LogAdmission(now);
  }

  // While connections are refused or cut off, one log line a second at most (an attack must
  // not turn into a flood of log lines).
  void LogAdmission(TimePoint now) {
    int64_t total =
        refused_over_capacity_ + refused_per_client_ + refused_busy_ + request_timeouts_;
    if (total == logged_refusals_ || now < next_refusal_log_) return;
    LogEvent("warn", "connections refused (503) or timed out (408)",
             {{"since_last_report", total - logged_refusals_},
              {"over_capacity_total", refused_over_capacity_.load()},
              {"per_client_total", refused_per_client_.load()},
              {"busy_total", refused_busy_.load()},
              {"request_timeouts_total", request_timeouts_.load()}});
    logged_refusals_ = total;
    next_refusal_log_ = now + std::chrono::seconds(1);
  }

  // ---- workers ----

  // Queues a connection whose request is complete (or unreadable: a worker answers 400).
  void Dispatch(std::unique_ptr<Conn> conn) {
    std::unique_lock lock(mu_);
    if (queue_.size() >= 4 * static_cast<size_t>(options_.max_workers)) {
      lock.unlock();
      ++refused_busy_;
      std::string wire =
          ErrorWire(503, "ServiceUnavailable",
                    "the server is handling as many requests as it can; retry shortly");
      (void)!::send(conn->fd, wire.data(), wire.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      Close(*conn);
      return;
    }
    conn->queued_at = SteadyClock::now();
    queue_.push_back(std::move(conn));
    // Joined first, so that workers which ended idle do not count against max_workers.
    ReapWorkersLocked();
    if (static_cast<size_t>(idle_workers_) >= queue_.size() ||
        static_cast<int>(workers_.size()) >= options_.max_workers) {
      work_cv_.notify_one();
      return;
    }
    uint64_t wid = next_worker_id_++;
    try {
      workers_[wid] = std::thread([this, wid] { WorkerMain(wid); });
    } catch (const std::system_error& e) {
      // The request waits for a running worker; with none running, nothing would serve it.
      workers_.erase(wid);
      LogEvent("warn", "cannot start a worker thread", {{"error", e.what()}});
      work_cv_.notify_one();
    }
  }

  void ReapWorkersLocked() {
    for (uint64_t wid : finished_workers_) {
      auto it = workers_.find(wid);
      if (it == workers_.end()) continue;
      it->second.join();  // it has returned already, or is about to
      workers_.erase(it);
    }
    finished_workers_.clear();
  }

  void WorkerMain(uint64_t wid) {
    std::unique_lock lock(mu_);
    for (;;) {
      ++idle_workers_;
      bool woken = work_cv_.wait_for(lock, options_.worker_idle_exit,
                                     [&] { return !queue_.empty() || workers_exit_; });
      --idle_workers_;
      if (!queue_.empty()) {
        std::unique_ptr<Conn> conn = std::move(queue_.front());
        queue_.pop_front();
        busy_fds_.insert(conn->fd);
        lock.unlock();
        if (SteadyClock::now() - conn->queued_at > options_.request_timeout) {
          // Its client has likely given up; running the handler now would only add load.
          ++refused_busy_;
          std::string wire =
              ErrorWire(503, "ServiceUnavailable",
                        fmt::format("the request waited over {} ms for the server; retry shortly",
                                    options_.request_timeout.count()));
          (void)!::send(conn->fd, wire.data(), wire.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
          Release(std::move(conn), false);
        } else {
          Serve(std::move(conn));
        }
        lock.lock();
        idle_cv_.notify_all();
        continue;
      }
      if (workers_exit_) return;
      if (!woken && static_cast<int>(workers_.size()) - static_cast<int>(finished_workers_.size()) >
                        kMinWorkers) {
        finished_workers_.push_back(wid);
        return;
      }
    }
  }

  // Answers the connection's request, and the ones that follow within `linger`; then hands the
  // connection back to the loop, or closes it.
  void Serve(std::unique_ptr<Conn> conn) {
    for (;;) {
      bool keep_alive = Answer(*conn);
      if (!keep_alive || stopping_) break;
      conn->NextRequest(options_);
      // While other requests wait for a worker, take only what has already arrived.
      bool others_wait;
      {
        std::lock_guard lock(mu_);
        others_wait = !queue_.empty();
      }
      TimePoint deadline =
          SteadyClock::now() +
          (others_wait ? TimePoint::duration::zero() : TimePoint::duration(options_.linger));
      ReadOutcome got = socket_io::ReadMessage(conn->fd, conn->buffer, *conn->parser, deadline,
                                               conn->parse_error);
      if (got == ReadOutcome::kMessage || got == ReadOutcome::kMalformed) continue;
      if (got == ReadOutcome::kClosed) break;
      // Nothing complete yet: the loop waits for the rest without holding this thread.
      if (conn->HasPartialRequest()) conn->request_began = SteadyClock::now();
      Release(std::move(conn), true);
      return;
    }
    Release(std::move(conn), false);
  }

  // A worker is done with `conn`: hands it back to the loop (`keep`, unless the loop has
  // ended) or closes it. Either way its descriptor leaves busy_fds_ first, so that Stop() never
  // shuts down a descriptor number another socket has taken since.
  void Release(std::unique_ptr<Conn> conn, bool keep) {
    std::unique_lock lock(mu_);
    if (auto it = busy_fds_.find(conn->fd); it != busy_fds_.end()) busy_fds_.erase(it);
    if (!keep || loop_done_) {
      CloseLocked(*conn);
      return;
    }
    returned_.push_back(std::move(conn));
    lock.unlock();
    Wake();
  }

  // Runs the handler on the connection's complete request (or answers 400 for an unreadable
  // one) and sends the response. True if the connection stays open for another request.
  bool Answer(Conn& c) {
    auto start = SteadyClock::now();
    c.answered_any = true;
    std::string request_id = Uuid::Random().ToString();
    beast_http::response<beast_http::string_body> res;
    bool keep_alive = false;
    if (c.parse_error) {
      // The request could not be read as HTTP (over a limit, malformed): answer 400 and close.
      const auto& ec = c.parse_error;
      std::string msg =
          ec == beast_http::error::body_limit
              ? fmt::format("request body exceeds the limit of {} bytes", options_.body_limit)
          : ec == beast_http::error::header_limit
              ? fmt::format("request headers exceed the limit of {} bytes", options_.header_limit)
              : fmt::format("malformed HTTP request: {}", ec.message());
      res.result(400);
      res.set(beast_http::field::content_type, "application/json");
      res.body() = ErrorBody(request_id, "InvalidRequest", msg);
      LogRequest("-", "-", 400, start, request_id);
    } else {
      auto& req = c.parser->get();
      HttpRequest r;
      r.method = std::string(req.method_string());
      std::string_view target = req.target();
      auto q = target.find('?');
      r.path = std::string(target.substr(0, q));
      if (q != std::string_view::npos) r.query = std::string(target.substr(q + 1));
      for (const auto& field : req) {
        std::string name(field.name_string());
        for (char& ch : name) {
          ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        }
        r.headers.emplace_back(std::move(name), std::string(field.value()));
      }
      r.body = std::move(req.body());
      r.request_id = request_id;
      keep_alive = req.keep_alive();
      res.version(req.version());
      HttpResponse out = handler_(r);
      res.result(static_cast<unsigned>(out.status));
      if (!out.body.empty()) res.set(beast_http::field::content_type, out.content_type);
      for (const auto& [k, v] : out.headers) res.set(k, v);
      res.body() = std::move(out.body);
      LogRequest(r.method, r.path, out.status, start, request_id);
    }
    res.set("x-request-id", request_id);
    keep_alive = keep_alive && !stopping_;
    res.keep_alive(keep_alive);
    res.prepare_payload();
    std::ostringstream wire;
    wire << res;
    bool sent = socket_io::SendAll(c.fd, wire.view(), SteadyClock::now() + options_.send_timeout);
    return sent && keep_alive;
  }

  void Close(Conn& c) {
    std::lock_guard lock(mu_);
    CloseLocked(c);
  }

  void CloseLocked(Conn& c) {
    if (c.fd < 0) return;
    ::shutdown(c.fd, SHUT_WR);
    ::close(c.fd);
    c.fd = -1;
    --open_;
    auto it = per_client_.find(c.client);
    if (it != per_client_.end() && --it->second <= 0) per_client_.erase(it);
  }

  static void LogRequest(std::string_view method, std::string_view path, int status,
                         TimePoint start, const std::string& request_id) {
    double latency_ms =
        std::chrono::duration<double, std::milli>(SteadyClock::now() - start).count();
    LogEvent("info", "request",
             {{"method", method},
              {"path", path},
              {"status", status},
              {"latency_ms", latency_ms},
              {"request_id", request_id}});
  }

  HttpServerOptions options_;
  HttpHandler handler_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd: wakes the loop to stop or to take returned connections
  uint16_t port_ = 0;
  std::thread loop_;
  std::atomic<bool> stopped_{false};
  std::atomic<bool> stopping_{false};

  // Event-loop thread only.
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> parked_;
  std::map<int, TimePoint> draining_;  // refused connections being read to their end
  size_t max_draining_ = 4096;
  bool accept_paused_ = false;
  uint64_t next_id_ = kFirstConnId;
  int64_t logged_refusals_ = 0;
  TimePoint next_refusal_log_{};

  std::atomic<int64_t> refused_over_capacity_{0};
  std::atomic<int64_t> refused_per_client_{0};
  std::atomic<int64_t> refused_busy_{0};
  std::atomic<int64_t> request_timeouts_{0};

  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // a request was queued, or workers must exit
  std::condition_variable idle_cv_;  // a worker finished a connection
  // Guarded by mu_:
  int open_ = 0;                                     // connections counted against the bounds
  std::unordered_map<std::string, int> per_client_;  // open connections by client key
  std::deque<std::unique_ptr<Conn>> queue_;          // complete requests waiting for a worker
  std::vector<std::unique_ptr<Conn>> returned_;      // handed back to the loop by workers
  std::map<uint64_t, std::thread> workers_;
  std::vector<uint64_t> finished_workers_;  // returned (or returning); to be joined
  std::multiset<int> busy_fds_;             // connections being served
  int idle_workers_ = 0;
  uint64_t next_worker_id_ = 1;
  bool loop_done_ = false;
  bool workers_exit_ = false;
};

}  // namespace

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                      HttpHandler handler) {
  auto server = std::make_unique<EventServer>(options, std::move(handler));
  FP_CHECK_OK(server->Bind());
  return std::unique_ptr<HttpServer>(std::move(server));
}

}  // namespace fp::http
