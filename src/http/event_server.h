#pragma once

// Internal to src/http: the HTTP server's implementation (see server.cc for its design),
// shared by server.cc (start, bind, stop), event_loop.cc (admission and reading requests),
// workers.cc (the worker pool) and response.cc (running the handler, writing the answer).
// Nothing else includes it.

#include <atomic>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "http/server.h"
#include "http/socket_io.h"
#include "http/tls.h"

namespace fp::http::detail {

namespace beast = boost::beast;
namespace beast_http = beast::http;

using socket_io::ParseOutcome;
using socket_io::ReadOutcome;
using TimePoint = MonoTime;
using Parser = beast_http::request_parser<beast_http::string_body>;

// A whole error response, for answers the event loop sends itself (before or instead of a
// handler): a fresh request id, "Connection: close", and Retry-After for 503.
std::string ErrorWire(Random& random, int status, std::string_view code, std::string_view message);

// A field of a response, as set on it.
struct WireField {
  std::string_view name;
  std::string_view value;
};

// The bytes of a response: its status line, the fields in `set_in_order` as Beast's set() would
// keep them (a field replaces the earlier ones of its name, compared without case, and goes
// last; its value without leading and trailing spaces and tabs), then Connection as
// keep_alive() adds it for the HTTP version (10 or 11), Content-Length (none for 204 and 304,
// which carry no body), and the body (none for HEAD). Written straight into one string: Beast's
// response object and its serializer through a stream cost the server more than the rest of
// answering a request. Byte for byte what BeastResponseWire writes for the same response;
// nullopt where this does not write it itself: a field that keep_alive() or prepare_payload()
// would merge with (Connection, Content-Length, Transfer-Encoding), another HTTP version, or a
// status below 200.
std::optional<std::string> DirectResponseWire(unsigned version, int status,
                                              std::span<const WireField> set_in_order,
                                              std::string_view body, bool keep_alive, bool head);
// The same response built as a Beast message and written by Beast's serializer.
std::string BeastResponseWire(unsigned version, int status, std::span<const WireField> set_in_order,
                              std::string_view body, bool keep_alive, bool head);
// DirectResponseWire, else BeastResponseWire.
std::string ResponseWire(unsigned version, int status, std::span<const WireField> set_in_order,
                         std::string_view body, bool keep_alive, bool head);

// A client connection. Owned by exactly one of: the event loop (waiting for a request), the
// work queue, or a worker (its request being handled).
struct Conn {
  uint64_t id = 0;
  int fd = -1;
  ssl_st* tls = nullptr;       // its TLS session, on a server with a certificate
  bool waits_to_send = false;  // the loop watches it for writability (a TLS handshake's flight)
  std::string client;          // the key its client's connections are counted under
  std::string address;         // the peer's address
  beast::flat_buffer buffer;
  std::optional<Parser> parser;
  beast::error_code parse_error;           // set when the request could not be read as HTTP
  std::optional<TimePoint> request_began;  // the first byte of the request being read
  TimePoint idle_since;                    // when it was accepted or last answered
  TimePoint queued_at;                     // when its complete request joined the queue
  bool answered_any = false;               // a first request must come within the request timeout

  void NextRequest(const HttpServerOptions& options, TimePoint now) {
    parser.emplace();
    parser->header_limit(static_cast<uint32_t>(options.header_limit));
    parser->body_limit(options.body_limit);
    parse_error = {};
    request_began.reset();
    idle_since = now;
  }
  bool HasPartialRequest() const { return buffer.size() > 0 || parser->got_some(); }
  socket_io::Stream stream() const { return {.fd = fd, .tls = tls}; }
};

// A refused connection being read to its end. Over TLS its answer waits for the handshake.
struct Drain {
  TimePoint deadline;
  ssl_st* tls = nullptr;
  std::string unsent;  // the answer, while the TLS handshake is not done
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
      : options_(std::move(options)),
        clock_(options_.clock != nullptr ? *options_.clock : MachineClock()),
        random_(options_.random != nullptr ? *options_.random : MachineRandom()),
        handler_(std::move(handler)) {}

  ~EventServer() override;

  Status Bind();

  uint16_t port() const override { return port_; }
  const HttpServerOptions& options() const override { return options_; }

  HttpServerStats stats() const override;

  void Stop() override;

 private:
  // Leaves room under the descriptor limit for the datastore, agent connections and refused
  // connections being drained.
  void FitToDescriptorLimit();

  // Adds (op EPOLL_CTL_ADD) or changes (EPOLL_CTL_MOD) what the loop watches `fd` for:
  // readability, or writability with `to_send`.
  bool Watch(int fd, uint64_t tag, int op, bool to_send = false);

  void Wake();

  // ---- the event loop (event_loop.cc) ----

  void Loop();

  void AcceptAll();

  // Sends `wire` (small: it fits a fresh socket's buffer), ends the sending side, and reads
  // what the client still sends for a moment, so that closing does not reset the connection
  // before the client has read the answer.
  // Over TLS, the handshake comes first: the answer is sent when it is done, within the request
  // timeout.
  void RefuseAndDrain(int fd, std::string wire);

  void DrainSome(int fd);

  void EndDrain(std::map<int, Drain>::iterator it);

  // Best effort, without waiting: an answer the server gives before closing the connection.
  static void SendNow(const Conn& c, const std::string& wire);

  // The loop takes the connection and waits for its next request.
  void Park(std::unique_ptr<Conn> conn);

  void TakeReturned();

  void OnReadable(uint64_t id);

  // Connections whose TLS session holds bytes already read from the socket: the socket will
  // not wake the loop for them, so the loop reads them next round.
  void ReadBuffered();

  // Closes connections past their deadline: a request still incomplete at the request deadline
  // gets 408; a connection idle past the idle timeout is closed silently.
  void Sweep();

  // While connections are refused or cut off, one log line a second at most (an attack must
  // not turn into a flood of log lines).
  void LogAdmission(TimePoint now);

  // ---- workers (workers.cc) ----

  // Queues a connection whose request is complete (or unreadable: a worker answers 400).
  void Dispatch(std::unique_ptr<Conn> conn);

  void ReapWorkersLocked() FP_REQUIRES(mu_);

  void WorkerMain(uint64_t wid);

  // Answers the connection's request, and the ones that follow within `linger`; then hands the
  // connection back to the loop, or closes it.
  void Serve(std::unique_ptr<Conn> conn);

  // A worker is done with `conn`: hands it back to the loop (`keep`, unless the loop has
  // ended) or closes it. Either way its descriptor leaves busy_fds_ first, so that Stop() never
  // shuts down a descriptor number another socket has taken since.
  void Release(std::unique_ptr<Conn> conn, bool keep);

  // ---- answering (response.cc) ----

  // Runs the handler on the connection's complete request (or answers 400 for an unreadable
  // one) and sends the response. True if the connection stays open for another request.
  bool Answer(Conn& c);

  // Closes the connection's socket and stops counting it against the connection bounds
  // (Close takes mu_; CloseLocked is called with mu_ held). Idempotent.
  void Close(Conn& c) FP_EXCLUDES(mu_);
  void CloseLocked(Conn& c) FP_REQUIRES(mu_);

  // `request`, if given, adds the fields of HttpServerOptions::logged_headers it carries.
  void LogRequest(std::string_view method, std::string_view path, int status, TimePoint start,
                  const std::string& request_id, const HttpRequest* request = nullptr);

  HttpServerOptions options_;
  const Clock& clock_;
  Random& random_;
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
  std::map<int, Drain> draining_;   // refused connections being read to their end
  std::vector<uint64_t> buffered_;  // parked connections with TLS bytes to read (ReadBuffered)
  size_t max_draining_ = 4096;
  bool accept_paused_ = false;
  uint64_t next_id_ = kFirstConnId;
  int64_t logged_refusals_ = 0;
  TimePoint next_refusal_log_{};

  std::atomic<int64_t> refused_over_capacity_{0};
  std::atomic<int64_t> refused_per_client_{0};
  std::atomic<int64_t> refused_busy_{0};
  std::atomic<int64_t> request_timeouts_{0};

  mutable Mutex mu_;
  std::condition_variable work_cv_;  // a request was queued, or workers must exit
  std::condition_variable idle_cv_;  // a worker finished a connection
  int open_ FP_GUARDED_BY(mu_) = 0;  // connections counted against the bounds
  // Open connections by client key.
  std::unordered_map<std::string, int> per_client_ FP_GUARDED_BY(mu_);
  // Complete requests waiting for a worker.
  std::deque<std::unique_ptr<Conn>> queue_ FP_GUARDED_BY(mu_);
  // Handed back to the loop by workers.
  std::vector<std::unique_ptr<Conn>> returned_ FP_GUARDED_BY(mu_);
  std::map<uint64_t, std::thread> workers_ FP_GUARDED_BY(mu_);
  // Returned (or returning); to be joined.
  std::vector<uint64_t> finished_workers_ FP_GUARDED_BY(mu_);
  std::multiset<int> busy_fds_ FP_GUARDED_BY(mu_);  // connections being served
  int idle_workers_ FP_GUARDED_BY(mu_) = 0;
  uint64_t next_worker_id_ FP_GUARDED_BY(mu_) = 1;
  bool loop_done_ FP_GUARDED_BY(mu_) = false;
  bool workers_exit_ FP_GUARDED_BY(mu_) = false;
};

}  // namespace fp::http::detail
