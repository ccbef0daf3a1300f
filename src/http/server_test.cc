// Connection admission: idle and slow clients hold no thread, cannot starve other clients, and
// are told 503 or 408 instead of being cut off without an answer.

#include "http/server.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/testing/manual_clock.h"
#include "common/testing/wait_for.h"
#include "http/client.h"

namespace fp::http {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using fp::testing::WaitFor;

// A raw TCP connection to 127.0.0.1:port from `source` (another loopback address stands for
// another client).
class RawConn {
 public:
  RawConn(uint16_t port, const char* source = "127.0.0.1") {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    ::inet_pton(AF_INET, source, &from.sin_addr);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0) {
      Fail();
      return;
    }
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) Fail();
  }
  ~RawConn() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawConn(RawConn&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  RawConn& operator=(RawConn&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }

  bool ok() const { return fd_ >= 0; }
  bool Send(std::string_view data) {
    return ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(data.size());
  }
  // Everything the server sends until it closes the connection or `timeout` passes.
  std::string ReadUntilClosed(std::chrono::milliseconds timeout) {
    std::string got;
    auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(1, left.count()))) <= 0) continue;
      char buf[4096];
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      got.append(buf, static_cast<size_t>(n));
    }
    return got;
  }
  bool closed() const { return closed_; }

 private:
  void Fail() {
    ::close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
  bool closed_ = false;
};

int ThreadCount() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

std::unique_ptr<HttpServer> StartServer(HttpServerOptions options) {
  auto server = HttpServer::Start(options, [](const HttpRequest&) {
    HttpResponse r;
    r.body = R"({"status":"ok"})";
    return r;
  });
  EXPECT_TRUE(server) << server.error().message();
  return std::move(*server);
}

// The client writes the request's head itself: what arrives is what it was given, a body that
// joins the head and one sent after it alike, over one keep-alive connection.
TEST(HttpClientTest, ARequestArrivesAsGivenWithSmallAndLargeBodies) {
  HttpServerOptions options;
  options.body_limit = 4 << 20;
  auto server = HttpServer::Start(options, [](const HttpRequest& r) {
    HttpResponse answer;
    answer.body = fmt::format("{} {} {} {} {} {}", r.method, r.path, r.query,
                              r.Header("authorization"), r.Header("x-request-id"), r.body.size());
    if (!r.body.empty()) answer.body += fmt::format(" {} {}", r.body.front(), r.body.back());
    return answer;
  });
  ASSERT_TRUE(server) << server.error().message();
  HttpClient client("server", fmt::format("http://127.0.0.1:{}", (*server)->port()), 5s,
                    "Bearer s3cret");
  const std::vector<std::pair<std::string, std::string>> headers = {{"X-Request-Id", "r-1"}};
  auto get = client.Call("GET", "/a/b?c=d", "", headers);
  ASSERT_TRUE(get) << get.error().message();
  EXPECT_EQ(get->body, "GET /a/b c=d Bearer s3cret r-1 0");
  for (size_t size : {size_t{3}, size_t{16} << 10, (size_t{16} << 10) + 1, size_t{3} << 20}) {
    std::string body(size, 'x');
    body.front() = '[';
    body.back() = ']';
    auto put = client.Call("PUT", "/nat", body, headers);
    ASSERT_TRUE(put) << put.error().message();
    EXPECT_EQ(put->body, fmt::format("PUT /nat  Bearer s3cret r-1 {} [ ]", size));
  }
  auto empty_post = client.Call("POST", "/stop", "", {});
  ASSERT_TRUE(empty_post) << empty_post.error().message();
  EXPECT_EQ(empty_post->body, "POST /stop  Bearer s3cret  0");
  EXPECT_FALSE(client.Call("GET", "/", "", {{"X-Bad", "a\r\nInjected: 1"}}));
}

// Start sends a call and returns; its answer is read at Finish. Two calls started one after the
// other are at the server together: its handler answers each only once both have arrived (or
// after 5 s alone, which the test would see).
TEST(HttpClientTest, StartedCallsAreAtThePeerTogetherAndAnsweredAtFinish) {
  Mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  auto server = HttpServer::Start({}, [&](const HttpRequest& r) {
    MutexLock lock(mu);
    ++arrived;
    cv.notify_all();
    bool together =
        MachineClock().WaitFor(lock, cv, 5s, [&]() FP_REQUIRES(mu) { return arrived >= 2; });
    HttpResponse answer;
    answer.body = fmt::format("{} {}", r.path, together ? "together" : "alone");
    return answer;
  });
  ASSERT_TRUE(server) << server.error().message();
  HttpClient client("server", fmt::format("http://127.0.0.1:{}", (*server)->port()), 10s);
  auto first = client.Start("PUT", "/first");
  auto second = client.Start("DELETE", "/second");
  auto second_answer = second->Finish();
  auto first_answer = first->Finish();
  ASSERT_TRUE(first_answer) << first_answer.error().message();
  ASSERT_TRUE(second_answer) << second_answer.error().message();
  EXPECT_EQ(first_answer->body, "/first together");
  EXPECT_EQ(second_answer->body, "/second together");
}

// A started call dropped without Finish ends there: its answer, which the peer writes only
// after the drop, is never taken for the answer to a later call.
TEST(HttpClientTest, ACallDroppedBeforeItsAnswerLeavesNothingForTheNext) {
  Mutex mu;
  std::condition_variable cv;
  bool dropped = false;
  auto server = HttpServer::Start({}, [&](const HttpRequest& r) {
    if (r.path == "/slow") {
      MutexLock lock(mu);
      MachineClock().WaitFor(lock, cv, 5s, [&]() FP_REQUIRES(mu) { return dropped; });
    }
    HttpResponse answer;
    answer.body = r.path;
    return answer;
  });
  ASSERT_TRUE(server) << server.error().message();
  HttpClient client("server", fmt::format("http://127.0.0.1:{}", (*server)->port()), 5s);
  auto warm = client.Start("GET", "/warm");  // leaves a keep-alive connection
  ASSERT_EQ(warm->Finish().value().body, "/warm");
  auto again = warm->Finish();
  ASSERT_FALSE(again) << "a call answered twice";
  EXPECT_EQ(again.error().kind(), ErrorKind::kInternal);
  client.Start("GET", "/slow").reset();
  {
    MutexLock lock(mu);
    dropped = true;
  }
  cv.notify_all();
  for (const char* path : {"/next", "/after"}) {
    auto answer = client.Call("GET", path);
    ASSERT_TRUE(answer) << answer.error().message();
    EXPECT_EQ(answer->body, path);
  }
}

TEST(HttpServerTest, IdleConnectionsHoldNoThread) {
  auto server = StartServer({});
  // Warm up the worker pool so that its threads are counted before and after alike.
  HttpClient client("server", fmt::format("http://127.0.0.1:{}", server->port()), 2s);
  ASSERT_TRUE(client.Call("GET", "/v1/ping"));
  int before = ThreadCount();
  std::vector<RawConn> idle;
  for (int i = 0; i < 300; ++i) {
    idle.emplace_back(server->port(), "127.0.0.2");
    ASSERT_TRUE(idle.back().ok());
  }
  // Half of them send part of a request: slow clients.
  for (size_t i = 0; i < idle.size(); i += 2)
    ASSERT_TRUE(idle[i].Send("GET /v1/ping HTTP/1.1\r\n"));
  WaitFor([&] { return server->stats().open_connections >= 301; });
  EXPECT_EQ(server->stats().open_connections, 301);  // 300 + the client's keep-alive connection
  EXPECT_LE(ThreadCount(), before + 2);
  auto answer = client.Call("GET", "/v1/ping");
  ASSERT_TRUE(answer) << answer.error().message();
  EXPECT_EQ(answer->status, 200);
}

TEST(HttpServerTest, AClientOverItsBoundGets503WithRetryAfterAndOthersAreServed) {
  HttpServerOptions options;
  options.max_connections_per_client = 20;
  auto server = StartServer(options);
  std::vector<RawConn> held;
  for (int i = 0; i < 20; ++i) held.emplace_back(server->port(), "127.0.0.2");
  RawConn over(server->port(), "127.0.0.2");
  ASSERT_TRUE(over.Send("GET /v1/ping HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::string answer = over.ReadUntilClosed(3s);
  EXPECT_TRUE(over.closed());
  EXPECT_NE(answer.find("HTTP/1.1 503"), std::string::npos) << answer;
  EXPECT_NE(answer.find("Retry-After: 1"), std::string::npos) << answer;
  EXPECT_NE(answer.find("x-request-id: "), std::string::npos) << answer;
  EXPECT_NE(answer.find("too many open connections from 127.0.0.2 (limit 20)"), std::string::npos)
      << answer;
  EXPECT_EQ(server->stats().refused_per_client, 1);
  // Another address is a different client.
  RawConn other(server->port(), "127.0.0.3");
  ASSERT_TRUE(other.Send("GET /v1/ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  EXPECT_NE(other.ReadUntilClosed(3s).find("HTTP/1.1 200"), std::string::npos);
  // A closed connection frees its place (once the server has seen it close).
  ASSERT_TRUE(WaitFor([&] { return server->stats().open_connections == 20; }));  // `held`
  held.pop_back();
  ASSERT_TRUE(WaitFor([&] { return server->stats().open_connections == 19; }));
  RawConn again(server->port(), "127.0.0.2");
  ASSERT_TRUE(again.Send("GET /v1/ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  EXPECT_NE(again.ReadUntilClosed(3s).find("HTTP/1.1 200"), std::string::npos)
      << "a closed connection did not free its place";
}

TEST(HttpServerTest, BeyondCapacityAConnectionGets503NotASilentClose) {
  HttpServerOptions options;
  options.max_connections = 10;
  auto server = StartServer(options);
  std::vector<RawConn> held;
  for (int i = 0; i < 10; ++i) held.emplace_back(server->port(), "127.0.0.2");
  RawConn over(server->port(), "127.0.0.3");
  ASSERT_TRUE(over.Send("GET /v1/ping HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::string answer = over.ReadUntilClosed(3s);
  EXPECT_NE(answer.find("HTTP/1.1 503"), std::string::npos) << answer;
  EXPECT_NE(answer.find("Retry-After: 1"), std::string::npos) << answer;
  EXPECT_NE(answer.find("at its limit of 10 open connections"), std::string::npos) << answer;
  EXPECT_EQ(server->stats().refused_over_capacity, 1);
}

TEST(HttpServerTest, ARequestTricklingPastTheRequestTimeoutGets408) {
  HttpServerOptions options;
  options.request_timeout = 600ms;
  auto server = StartServer(options);
  RawConn slow(server->port());
  // A first request answered at once: the second one's deadline counts from its first byte.
  ASSERT_TRUE(slow.Send("GET /v1/ping HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::string answer = slow.ReadUntilClosed(300ms);
  ASSERT_NE(answer.find("HTTP/1.1 200"), std::string::npos) << answer;
  answer.clear();
  auto start = Clock::now();
  // One header line every 200 ms: each arrives well within any per-read timeout, but the whole
  // head never does within the request timeout.
  for (int i = 0; i < 20 && !slow.closed(); ++i) {
    if (!slow.Send(i == 0 ? "GET /v1/ping HTTP/1.1\r\n" : fmt::format("X-Slow-{}: y\r\n", i))) {
      break;
    }
    answer += slow.ReadUntilClosed(200ms);
  }
  auto elapsed = Clock::now() - start;
  EXPECT_TRUE(slow.closed());
  EXPECT_NE(answer.find("HTTP/1.1 408"), std::string::npos) << answer;
  EXPECT_GE(elapsed, 600ms);
  EXPECT_LT(elapsed, 600ms + 1500ms);
  EXPECT_EQ(server->stats().request_timeouts, 1);
}

TEST(HttpServerTest, AConnectionThatSendsNothingIsClosedAtTheRequestTimeout) {
  HttpServerOptions options;
  options.request_timeout = 400ms;
  options.idle_timeout = 60s;
  auto server = StartServer(options);
  RawConn silent(server->port());
  auto start = Clock::now();
  std::string answer = silent.ReadUntilClosed(5s);
  EXPECT_TRUE(silent.closed());
  EXPECT_EQ(answer, "");
  EXPECT_LT(Clock::now() - start, 2s);
}

TEST(HttpServerTest, AKeepAliveConnectionIsServedAgainAfterIdlingInTheEventLoop) {
  HttpServerOptions options;
  options.linger = 1ms;
  auto server = StartServer(options);
  RawConn conn(server->port());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(conn.Send("GET /v1/ping HTTP/1.1\r\nHost: x\r\n\r\n"));
    std::string got = conn.ReadUntilClosed(300ms);  // the connection stays open: times out
    EXPECT_NE(got.find("HTTP/1.1 200"), std::string::npos) << got;
    EXPECT_FALSE(conn.closed());
  }
  // Two requests in one write (pipelined) get two answers.
  ASSERT_TRUE(conn.Send("GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::string both = conn.ReadUntilClosed(300ms);
  EXPECT_NE(both.find("HTTP/1.1 200"), both.rfind("HTTP/1.1 200")) << both;
}

// The server's threads carry its name, for `top -H`: its event loop and its workers.
TEST(HttpServerTest, ItsThreadsAreNamedForTheServer) {
  auto names = [] {
    std::multiset<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
      std::ifstream comm(e.path() / "comm");
      std::string name;
      std::getline(comm, name);
      out.insert(name);
    }
    return out;
  };
  HttpServerOptions options;
  options.thread_name = "named";
  auto server = StartServer(options);
  RawConn conn(server->port());
  ASSERT_TRUE(conn.Send("GET /x HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_NE(conn.ReadUntilClosed(300ms).find(" 200 OK"), std::string::npos);
  std::multiset<std::string> now = names();
  EXPECT_EQ(now.count("named-loop"), 1u);
  EXPECT_GE(now.count("named-worker"), 1u);
}

// A request being handled when the server begins to stop is answered, and told the connection
// closes (its client must not send another on it); so is an HTTP/1.0 keep-alive request.
TEST(HttpServerTest, ARequestHandledWhileTheServerStopsIsAnsweredWithConnectionClose) {
  for (std::string_view version : {"HTTP/1.1", "HTTP/1.0"}) {
    std::promise<void> entered;
    std::promise<void> release;
    std::shared_future<void> released = release.get_future().share();
    auto server = HttpServer::Start({}, [&](const HttpRequest&) {
                    entered.set_value();
                    released.wait();
                    return HttpResponse{.body = "{}"};
                  }).value();
    const uint16_t port = server->port();
    RawConn conn(port);
    ASSERT_TRUE(
        conn.Send(fmt::format("GET /x {}\r\nHost: x\r\nConnection: keep-alive\r\n\r\n", version)));
    entered.get_future().wait();
    std::thread stopper([&] { server->Stop(); });
    // Stopping has begun once the server takes no new connection.
    ASSERT_TRUE(WaitFor([&] { return !RawConn(port).ok(); }, 5s));
    release.set_value();
    std::string got = conn.ReadUntilClosed(2s);
    stopper.join();
    EXPECT_NE(got.find(" 200 OK\r\n"), std::string::npos) << got;
    if (version == "HTTP/1.1") {
      EXPECT_NE(got.find("\r\nConnection: close\r\n"), std::string::npos) << got;
    } else {
      EXPECT_EQ(got.find("keep-alive"), std::string::npos) << got;
    }
    EXPECT_TRUE(conn.closed());
  }
}

// A handler that records how many run at once, and can be held until released.
class Gate {
 public:
  HttpResponse Handle(std::chrono::milliseconds hold) {
    int now = ++running_;
    for (int seen = peak_.load(); now > seen && !peak_.compare_exchange_weak(seen, now);) {
    }
    ++calls_;
    {
      MutexLock lock(mu_);
      MachineClock().WaitFor(lock, cv_, hold, [&]() FP_REQUIRES(mu_) { return open_; });
    }
    --running_;
    HttpResponse r;
    r.body = "{}";
    return r;
  }
  void Open() {
    MutexLock lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  int peak() const { return peak_; }
  int calls() const { return calls_; }
  void ResetPeak() { peak_ = 0; }

 private:
  std::atomic<int> running_{0}, peak_{0}, calls_{0};
  Mutex mu_;
  std::condition_variable cv_;
  bool open_ FP_GUARDED_BY(mu_) = false;
};

// Sends one request on a connection of its own from each of `n` threads; returns their answers.
std::vector<std::string> Wave(uint16_t port, int n) {
  std::vector<std::string> answers(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      RawConn c(port);
      c.Send("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
      answers[static_cast<size_t>(i)] = c.ReadUntilClosed(5s);
    });
  }
  for (auto& t : threads) t.join();
  return answers;
}

TEST(HttpServerTest, ThePoolGrowsBackToMaxWorkersAfterIdleWorkersEnded) {
  HttpServerOptions options;
  options.max_workers = 8;
  options.worker_idle_exit = 100ms;
  Gate gate;
  auto server = HttpServer::Start(options, [&](const HttpRequest&) { return gate.Handle(300ms); });
  ASSERT_TRUE(server);
  Wave((*server)->port(), 8);
  EXPECT_EQ(gate.peak(), 8);
  // The idle workers end, down to the minimum; a new burst must get all eight again.
  EXPECT_TRUE(WaitFor([&] { return (*server)->stats().workers == 4; }));
  gate.ResetPeak();
  Wave((*server)->port(), 8);
  EXPECT_EQ(gate.peak(), 8);
}

TEST(HttpServerTest, AFullQueueAnswers503AndARequestThatWaitedTooLongIsNotRun) {
  fp::testing::ManualClock clock;
  HttpServerOptions options;
  options.clock = &clock;
  options.max_workers = 1;  // a queue of 4
  options.request_timeout = 400ms;
  Gate gate;
  auto server = HttpServer::Start(options, [&](const HttpRequest&) { return gate.Handle(5s); });
  ASSERT_TRUE(server);
  uint16_t port = (*server)->port();
  // One request holds the only worker; four wait in the queue; the sixth finds it full.
  std::vector<RawConn> conns;
  for (int i = 0; i < 5; ++i) {
    conns.emplace_back(port);
    ASSERT_TRUE(conns.back().Send("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    if (i == 0) {
      ASSERT_TRUE(WaitFor([&] { return gate.calls() == 1; }));
    }
  }
  ASSERT_TRUE(WaitFor([&] { return (*server)->stats().queued_requests == 4; }));
  RawConn sixth(port);
  ASSERT_TRUE(sixth.Send("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::string refused = sixth.ReadUntilClosed(2s);
  EXPECT_NE(refused.find("HTTP/1.1 503"), std::string::npos) << refused;
  EXPECT_NE(refused.find("handling as many requests as it can"), std::string::npos) << refused;
  EXPECT_EQ((*server)->stats().refused_busy, 1);
  // Past the request timeout (on the server's clock) the queued four are not run when the
  // worker frees up: 503.
  clock.Advance(500ms);
  gate.Open();
  for (size_t i = 1; i < conns.size(); ++i) {
    std::string answer = conns[i].ReadUntilClosed(3s);
    EXPECT_NE(answer.find("HTTP/1.1 503"), std::string::npos) << answer;
    EXPECT_NE(answer.find("waited over 400 ms"), std::string::npos) << answer;
  }
  EXPECT_NE(conns[0].ReadUntilClosed(3s).find("HTTP/1.1 200"), std::string::npos);
  EXPECT_EQ(gate.calls(), 1);
  EXPECT_EQ((*server)->stats().refused_busy, 5);
}

TEST(HttpServerTest, EveryWayAConnectionEndsGivesBackItsPlace) {
  HttpServerOptions options;
  options.request_timeout = 300ms;
  auto server = StartServer(options);
  {
    RawConn http10(server->port());
    http10.Send("GET / HTTP/1.0\r\n\r\n");
    EXPECT_NE(http10.ReadUntilClosed(2s).find("HTTP/1.0 200"), std::string::npos);
    RawConn garbage(server->port());
    garbage.Send("GARBAGE\r\n\r\n");
    EXPECT_NE(garbage.ReadUntilClosed(2s).find("HTTP/1.1 400"), std::string::npos);
    RawConn partial(server->port());
    partial.Send("GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HT");
    EXPECT_NE(partial.ReadUntilClosed(2s).find("HTTP/1.1 408"), std::string::npos);
    RawConn idle(server->port());  // closed by the client
  }
  WaitFor([&] { return server->stats().open_connections == 0; });
  EXPECT_EQ(server->stats().open_connections, 0);
}

}  // namespace
}  // namespace fp::http
