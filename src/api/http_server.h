#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"

namespace fp::api {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // percent-encoded path, without the query
  std::string query;   // raw query string, without '?'
  std::vector<std::pair<std::string, std::string>> headers;  // names lowercased
  std::string body;
  std::string request_id;  // assigned by the server; echoed in errors and the log

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
  std::string host = "127.0.0.1";
  uint16_t port = 0;            // 0: the kernel picks a free port
  size_t body_limit = 1 << 20;  // larger bodies get 400 without reaching the handler
  size_t header_limit = 16 << 10;
  int max_connections = 1024;     // one thread each; further connections are closed at once
  int idle_timeout_seconds = 60;  // a connection idle (or trickling) this long is closed
};

// An HTTP/1.1 server (Beast's parser and serializer over blocking sockets, one thread per
// connection) with keep-alive, TCP_NODELAY, timeouts and body/header limits. Every response carries
// `x-request-id`; one structured log line is written per request (method, path, status, latency,
// request id).
class HttpServer {
 public:
  // Binds and starts serving. InvalidRequest if the address cannot be parsed, Internal if it
  // cannot be bound.
  static Result<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                   HttpHandler handler);
  virtual ~HttpServer() = default;

  // The bound port (useful with port 0).
  virtual uint16_t port() const = 0;
  // Stops accepting, lets requests in progress finish, and joins all threads. Idempotent.
  virtual void Stop() = 0;
};

}  // namespace fp::api
