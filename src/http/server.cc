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
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "common/thread_name.h"
#include "http/event_server.h"

namespace fp::http {

std::string HttpRequest::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return v;
  }
  return {};
}

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                      HttpHandler handler) {
  auto server = std::make_unique<detail::EventServer>(options, std::move(handler));
  FP_CHECK_OK(server->Bind());
  return std::unique_ptr<HttpServer>(std::move(server));
}

namespace detail {

EventServer::~EventServer() {
  Stop();
  for (int fd : {listen_fd_, epoll_fd_, wake_fd_}) {
    if (fd >= 0) ::close(fd);
  }
}

Status EventServer::Bind() {
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
  if (!Watch(listen_fd_, kListenTag, EPOLL_CTL_ADD) || !Watch(wake_fd_, kWakeTag, EPOLL_CTL_ADD)) {
    return fail("epoll_ctl");
  }
  loop_ = std::thread([this] {
    NameThisThread(options_.thread_name + "-loop");
    Loop();
  });
  return Ok();
}

HttpServerStats EventServer::stats() const {
  HttpServerStats s;
  {
    MutexLock lock(mu_);
    s.open_connections = open_;
    s.queued_requests = static_cast<int64_t>(queue_.size());
    // Stop moves workers_ out and leaves finished_workers_: never below 0 after it.
    s.workers = std::max<int64_t>(
        0, static_cast<int64_t>(workers_.size()) - static_cast<int64_t>(finished_workers_.size()));
  }
  s.refused_over_capacity = refused_over_capacity_.load();
  s.refused_per_client = refused_per_client_.load();
  s.refused_busy = refused_busy_.load();
  s.request_timeouts = request_timeouts_.load();
  return s;
}

void EventServer::Stop() {
  if (stopped_.exchange(true) || !loop_.joinable()) return;
  // The loop stops accepting and closes every connection that waits for a request; busy ones
  // answer theirs ("Connection: close") and end.
  stopping_ = true;
  Wake();
  loop_.join();
  // No connection may complete in the backlog that nobody will accept.
  ::close(listen_fd_);
  listen_fd_ = -1;
  MutexLock lock(mu_);
  if (!clock_.WaitFor(lock, idle_cv_, std::chrono::seconds(10),
                      [&]() FP_REQUIRES(mu_) { return queue_.empty() && busy_fds_.empty(); })) {
    // Still busy after 10 s (a peer that stops reading, a slow handler): cut the sockets, so
    // that sends fail at once; the handlers themselves must still return.
    for (int fd : busy_fds_) ::shutdown(fd, SHUT_RDWR);
    for (auto& conn : queue_) CloseLocked(*conn);
    queue_.clear();
  }
  workers_exit_ = true;
  work_cv_.notify_all();
  std::map<uint64_t, std::thread> workers = std::move(workers_);
  lock.Unlock();
  for (auto& [id, t] : workers) t.join();
}

void EventServer::FitToDescriptorLimit() {
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

bool EventServer::Watch(int fd, uint64_t tag, int op, bool to_send) {
  epoll_event ev{};
  ev.events = to_send ? EPOLLOUT : EPOLLIN;
  ev.data.u64 = tag;
  return ::epoll_ctl(epoll_fd_, op, fd, &ev) == 0;
}

void EventServer::Wake() {
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

}  // namespace detail
}  // namespace fp::http
