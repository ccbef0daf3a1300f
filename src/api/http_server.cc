// The HTTP server: Beast parses and serializes, plain POSIX sockets carry the bytes.
//
// One thread per connection, blocking I/O. A request is read, handled and answered on the
// thread the kernel wakes for that connection, with no hand-off between threads: on a small
// machine the context switches of a shared I/O loop plus a worker pool cost more than the
// handlers themselves. Handlers block (on the database, on agents), so a connection's thread
// is the natural place for them anyway.

#include "api/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <system_error>
#include <thread>
#include <vector>

#include "api/log.h"
#include "api/socket_io.h"
#include "common/uuid.h"

namespace fp::api {

namespace beast = boost::beast;
namespace http = beast::http;

std::string HttpRequest::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return v;
  }
  return {};
}

namespace {

std::string ErrorBody(std::string_view request_id, std::string_view code, std::string_view msg) {
  nlohmann::json j = {{"request_id", request_id}, {"error_code", code}, {"message", msg}};
  return j.dump();
}

using socket_io::ReadOutcome;
using socket_io::SteadyClock;

class ThreadedServer final : public HttpServer {
 public:
  ThreadedServer(HttpServerOptions options, HttpHandler handler)
      : options_(std::move(options)), handler_(std::move(handler)) {}

  ~ThreadedServer() override {
    Stop();
    for (int fd : {listen_fd_, wake_[0], wake_[1]}) {
      if (fd >= 0) ::close(fd);
    }
  }

  Status Bind() {
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
    listen_fd_ = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
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
    if (::pipe2(wake_, O_CLOEXEC) != 0) return fail("pipe");
    acceptor_ = std::thread([this] { AcceptLoop(); });
    return Ok();
  }

  uint16_t port() const override { return port_; }

  void Stop() override {
    if (stopped_.exchange(true) || !acceptor_.joinable()) return;
    // Stop accepting first: the port must not keep accepting connections nobody answers.
    stopping_ = true;
    char byte = 0;
    (void)!::write(wake_[1], &byte, 1);
    acceptor_.join();
    ::close(listen_fd_);
    listen_fd_ = -1;
    // Close connections that wait for a request; busy ones answer theirs ("Connection:
    // close") and end. Shutting down reading wakes a thread blocked in poll on the socket.
    {
      std::lock_guard lock(mu_);
      for (auto& [id, c] : conns_) {
        if (c.idle) ::shutdown(c.fd, SHUT_RD);
      }
    }
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::seconds(10), [&] { return live_ == 0; })) {
      // Still busy after 10 s (a peer that stopped reading): cut the sockets.
      for (auto& [id, c] : conns_) ::shutdown(c.fd, SHUT_RDWR);
    }
    std::map<uint64_t, Conn> all = std::move(conns_);
    lock.unlock();
    for (auto& [id, c] : all) {
      if (c.thread.joinable()) c.thread.join();
    }
  }

 private:
  struct Conn {
    int fd = -1;
    bool idle = false;  // waiting for its next request
    std::thread thread;
  };

  void AcceptLoop() {
    for (;;) {
      pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      int n = ::poll(fds, 2, -1);
      if (n < 0 && errno == EINTR) continue;
      if (stopping_ || n < 0 || (fds[1].revents & POLLIN)) return;
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        // Out of descriptors (EMFILE) or memory: the connection stays queued and poll would
        // report it again at once; pause rather than spin.
        if (errno != EINTR && errno != ECONNABORTED) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        continue;
      }
      ReapFinished();
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      std::lock_guard lock(mu_);
      if (static_cast<int>(conns_.size()) >= options_.max_connections) {
        LogEvent("warn", "connection refused: too many connections",
                 {{"max_connections", options_.max_connections}});
        ::close(fd);
        continue;
      }
      uint64_t id = next_id_++;
      Conn& c = conns_[id];
      c.fd = fd;
      try {
        c.thread = std::thread([this, id, fd] { Serve(id, fd); });
      } catch (const std::system_error& e) {
        LogEvent("warn", "connection refused: cannot start its thread", {{"error", e.what()}});
        conns_.erase(id);
        ::close(fd);
        continue;
      }
      ++live_;
    }
  }

  // Joins the threads of connections that ended.
  void ReapFinished() {
    std::vector<std::thread> done;
    {
      std::lock_guard lock(mu_);
      for (uint64_t id : finished_) {
        auto it = conns_.find(id);
        if (it == conns_.end()) continue;
        done.push_back(std::move(it->second.thread));
        conns_.erase(it);
      }
      finished_.clear();
    }
    for (auto& t : done) t.join();
  }

  void SetIdle(uint64_t id, bool idle) {
    std::lock_guard lock(mu_);
    conns_[id].idle = idle;
  }

  void Serve(uint64_t id, int fd) {
    beast::flat_buffer buffer;
    const auto timeout = std::chrono::seconds(options_.idle_timeout_seconds);
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.header_limit(static_cast<uint32_t>(options_.header_limit));
      parser.body_limit(options_.body_limit);
      SetIdle(id, true);
      // Stop() may have run its pass over idle connections before this one became idle.
      if (stopping_) break;
      beast::error_code ec;
      ReadOutcome got =
          socket_io::ReadMessage(fd, buffer, parser, SteadyClock::now() + timeout, ec);
      SetIdle(id, false);
      if (got == ReadOutcome::kClosed || got == ReadOutcome::kTimedOut) break;
      auto start = SteadyClock::now();
      std::string request_id = Uuid::Random().ToString();
      http::response<http::string_body> res;
      bool keep_alive = false;
      if (got == ReadOutcome::kMalformed) {
        // The request could not be read as HTTP (over a limit, malformed): answer 400 and close.
        std::string msg =
            ec == http::error::body_limit
                ? fmt::format("request body exceeds the limit of {} bytes", options_.body_limit)
            : ec == http::error::header_limit
                ? fmt::format("request headers exceed the limit of {} bytes", options_.header_limit)
                : fmt::format("malformed HTTP request: {}", ec.message());
        res.result(400);
        res.set(http::field::content_type, "application/json");
        res.body() = ErrorBody(request_id, "InvalidRequest", msg);
        LogRequest("-", "-", 400, start, request_id);
      } else {
        auto& req = parser.get();
        HttpRequest r;
        r.method = std::string(req.method_string());
        std::string_view target = req.target();
        auto q = target.find('?');
        r.path = std::string(target.substr(0, q));
        if (q != std::string_view::npos) r.query = std::string(target.substr(q + 1));
        for (const auto& field : req) {
          std::string name(field.name_string());
          for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
          r.headers.emplace_back(std::move(name), std::string(field.value()));
        }
        r.body = std::move(req.body());
        r.request_id = request_id;
        keep_alive = req.keep_alive();
        res.version(req.version());
        HttpResponse out = handler_(r);
        res.result(static_cast<unsigned>(out.status));
        if (!out.body.empty()) res.set(http::field::content_type, out.content_type);
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
      if (!socket_io::SendAll(fd, wire.view(), SteadyClock::now() + timeout) || !keep_alive) {
        break;
      }
    }
    ::shutdown(fd, SHUT_WR);
    std::lock_guard lock(mu_);
    // Closed under the lock: Stop() never shuts down a descriptor number already reused.
    ::close(fd);
    conns_[id].fd = -1;
    finished_.push_back(id);
    --live_;
    cv_.notify_all();
  }

  static void LogRequest(std::string_view method, std::string_view path, int status,
                         SteadyClock::time_point start, const std::string& request_id) {
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
  int wake_[2] = {-1, -1};  // a byte written here ends the accept loop
  uint16_t port_ = 0;
  std::thread acceptor_;
  std::atomic<bool> stopped_{false};
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::condition_variable cv_;      // signalled when a connection ends
  std::map<uint64_t, Conn> conns_;  // guarded by mu_
  std::vector<uint64_t> finished_;  // ended, thread not yet joined; guarded by mu_
  int live_ = 0;                    // connections whose thread still runs; guarded by mu_
  uint64_t next_id_ = 1;            // accept thread only
};

}  // namespace

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                      HttpHandler handler) {
  auto server = std::make_unique<ThreadedServer>(options, std::move(handler));
  FP_CHECK_OK(server->Bind());
  return std::unique_ptr<HttpServer>(std::move(server));
}

}  // namespace fp::api
