#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/error.h"
#include "common/random.h"

namespace fp::http {

class TlsCertificate;  // http/tls.h

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // percent-encoded path, without the query
  std::string query;   // raw query string, without '?'
  std::vector<std::pair<std::string, std::string>> headers;  // names lowercased
  std::string body;
  std::string request_id;      // assigned by the server; echoed in errors and the log
  std::string source_address;  // the client's IP address (empty where no socket carried it)
  std::string client_key;      // the client its connections are counted as (IPv6: its /64)
  bool tls = false;            // it came over TLS

  // The first header with this (lowercase) name, or empty.
  std::string Header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string body;  // empty for 204
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
};

// Handles one request. Called on the thread of the request's connection, which serves nothing
// else until the handler returns; it may block (on the database, on agents). Must not throw.
using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

struct HttpServerOptions {
  // What its threads are named: NAME-loop, NAME-worker (common/thread_name.h).
  std::string thread_name = "http";
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: the kernel picks a free port
  // Serve HTTPS with this certificate (TLS 1.2 and 1.3), else plain HTTP. The handshake is
  // read by the event loop like a request, within request_timeout, and holds no worker. The
  // process must ignore SIGPIPE (TLS writes may raise it).
  std::shared_ptr<TlsCertificate> tls;
  size_t body_limit = 1 << 20;  // larger bodies get 400 without reaching the handler
  size_t header_limit = 16 << 10;
  // Open connections, idle ones included. A connection beyond it is answered 503 with
  // Retry-After and closed. Lowered at start to what the descriptor limit allows.
  int max_connections = 16384;
  // Open connections from one client address (an IPv6 client: its /64), answered likewise
  // beyond it, so that one client cannot take the capacity every other client needs.
  int max_connections_per_client = 1024;
  // Requests handled at once, one thread each (started as needed, ended after
  // worker_idle_exit). Complete requests beyond it wait in a queue of 4 x this; beyond that,
  // and for a request that waited there longer than request_timeout, 503.
  int max_workers = 512;
  // From a request's first byte to its last, head and body: a slower client gets 408 and its
  // connection is closed. Until its request is complete a connection holds no thread.
  std::chrono::milliseconds request_timeout{10'000};
  // A keep-alive connection with no request for this long is closed.
  std::chrono::milliseconds idle_timeout{60'000};
  // After answering, a worker waits this long for the connection's next request before it
  // hands the connection back to the event loop: a busy client's requests then skip two thread
  // hand-offs each.
  std::chrono::milliseconds linger{5};
  // A response the client does not take within this is abandoned and the connection closed.
  std::chrono::milliseconds send_timeout{10'000};
  // A worker idle this long ends (down to 4 workers); more are started as requests need them.
  std::chrono::milliseconds worker_idle_exit{30'000};
  // Requests that only read (GET, HEAD) and succeeded (status below 400) are logged at debug
  // instead of info: an agent's server, polled by the control plane all the time, sets it.
  bool quiet_reads = false;
  // GETs of these paths that succeed are logged at debug too (a server's /metrics, scraped
  // all the time).
  std::vector<std::string> quiet_paths;
  // Request headers whose values go into the request's log line: (lowercase header name, log
  // field). An agent logs whom a call was made for (the control plane's request and saga).
  std::vector<std::pair<std::string, std::string>> logged_headers;
  // Whose time the timeouts above are measured in, and what request ids are drawn from; unset:
  // the machine's (MachineClock, MachineRandom). Must outlive the server.
  const Clock* clock = nullptr;
  Random* random = nullptr;
};

// Counters since start; thread-safe reads.
struct HttpServerStats {
  int64_t open_connections = 0;
  int64_t refused_over_capacity = 0;  // 503 at accept: max_connections reached
  int64_t refused_per_client = 0;     // 503 at accept: the client's bound reached
  // 503 for a complete request: the queue was full, or it waited there past request_timeout
  int64_t refused_busy = 0;
  int64_t request_timeouts = 0;  // 408: the request did not arrive in time
  int64_t queued_requests = 0;   // complete requests waiting for a worker now
  int64_t workers = 0;           // worker threads now (idle ones end after worker_idle_exit)
};

// An HTTP/1.1 server with keep-alive, TCP_NODELAY, timeouts and body/header limits (Beast's
// parser and serializer over plain sockets). One event-loop thread (epoll) accepts connections
// and reads requests without blocking; a complete request goes to a worker thread, which runs
// the handler and writes the answer. Idle and slow connections therefore cost a descriptor and
// what they have sent so far (a few KiB idle; up to the header and body limits for a request
// that stalls, which only the connection bounds limit in total), never a thread. Every
// response carries `x-request-id`; one structured log line is written per request (method,
// path, status, latency, request id).
class HttpServer {
 public:
  // Binds and starts serving. InvalidRequest if the address cannot be parsed, Internal if it
  // cannot be bound.
  static Result<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                   HttpHandler handler);
  virtual ~HttpServer() = default;

  // The bound port (useful with port 0).
  virtual uint16_t port() const = 0;
  // The limits in force (max_connections may have been lowered at start).
  virtual const HttpServerOptions& options() const = 0;
  virtual HttpServerStats stats() const = 0;
  // Stops accepting, closes connections that wait for a request, lets requests in progress
  // (and those already queued) finish, and joins all threads. Handlers must return (theirs are
  // bounded by the agent and database deadlines): after 10 s their sockets are shut down, but
  // Stop waits for the handlers themselves. Idempotent; call it from one thread, never from a
  // handler.
  virtual void Stop() = 0;
};

}  // namespace fp::http
