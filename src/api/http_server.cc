// The only translation unit that includes Boost.Beast/Asio (they are slow to compile).

#include "api/http_server.h"

#include <fmt/format.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "api/log.h"
#include "common/uuid.h"

namespace fp::api {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

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

// Every thread runs the I/O loop, and a request's handler runs inline on the thread that read
// it: no hand-off between an I/O thread and a worker (two context switches per request). Each
// connection is a coroutine on a strand of its own, so its steps never run concurrently.
class BeastServer final : public HttpServer {
 public:
  BeastServer(HttpServerOptions options, HttpHandler handler)
      : options_(std::move(options)),
        handler_(std::move(handler)),
        ioc_(options_.worker_threads),
        accept_strand_(asio::make_strand(ioc_)),
        acceptor_(accept_strand_) {}

  ~BeastServer() override { Stop(); }

  Status Bind() {
    boost::system::error_code ec;
    auto address = asio::ip::make_address(options_.host, ec);
    if (ec) {
      return Fail(Error::InvalidRequest(
          fmt::format("invalid listen address \"{}\": {}", options_.host, ec.message())));
    }
    tcp::endpoint endpoint(address, options_.port);
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return Fail(Error::Internal(
          fmt::format("cannot listen on {}:{}: {}", options_.host, options_.port, ec.message())));
    }
    port_ = acceptor_.local_endpoint().port();
    asio::co_spawn(accept_strand_, Accept(), asio::detached);
    for (int i = 0; i < std::max(1, options_.worker_threads); ++i) {
      threads_.emplace_back([this] { ioc_.run(); });
    }
    return Ok();
  }

  uint16_t port() const override { return port_; }

  void Stop() override {
    if (stopped_.exchange(true)) return;
    // Stop accepting, close connections that wait for a request, and make every busy
    // connection answer its request (with "Connection: close") before it ends.
    stopping_ = true;
    std::promise<void> closed;
    asio::post(accept_strand_, [this, &closed] {
      boost::system::error_code ignored;
      acceptor_.close(ignored);
      closed.set_value();
    });
    // The listener must be closed before the loop stops, or the port would keep accepting
    // connections nobody answers.
    closed.get_future().wait();
    {
      std::lock_guard lock(idle_mu_);
      for (const auto& [id, idle] : idle_) {
        // On the connection's own strand: it is still waiting there, or it has moved on and
        // removed itself (then there is nothing to cancel).
        asio::post(idle.executor, [this, id = id] {
          std::lock_guard inner(idle_mu_);
          auto it = idle_.find(id);
          boost::system::error_code ignored;
          // Cancel rather than close: a read that already completed still gets its answer.
          if (it != idle_.end()) it->second.stream->socket().cancel(ignored);
        });
      }
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (active_sessions_.load() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ioc_.stop();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  struct Idle {
    beast::tcp_stream* stream;
    asio::any_io_executor executor;
  };

  asio::awaitable<void> Accept() {
    for (;;) {
      boost::system::error_code ec;
      // Each connection gets a strand of its own.
      tcp::socket socket = co_await acceptor_.async_accept(
          asio::make_strand(ioc_), asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        if (!acceptor_.is_open()) co_return;
        continue;
      }
      socket.set_option(tcp::no_delay(true), ec);
      auto executor = socket.get_executor();
      asio::co_spawn(executor, Session(std::move(socket)), asio::detached);
    }
  }

  asio::awaitable<void> Session(tcp::socket socket) {
    ++active_sessions_;
    const uint64_t id = next_session_id_.fetch_add(1);
    beast::tcp_stream stream(std::move(socket));
    beast::flat_buffer buffer;
    while (!stopping_) {
      http::request_parser<http::string_body> parser;
      parser.header_limit(static_cast<uint32_t>(options_.header_limit));
      parser.body_limit(options_.body_limit);
      stream.expires_after(std::chrono::seconds(options_.idle_timeout_seconds));
      boost::system::error_code ec;
      {
        std::lock_guard lock(idle_mu_);
        idle_.emplace(id, Idle{&stream, stream.get_executor()});
      }
      // Stop() may have run its cancellation pass between the loop test and the line above.
      if (stopping_) {
        std::lock_guard lock(idle_mu_);
        idle_.erase(id);
        break;
      }
      co_await http::async_read(stream, buffer, parser,
                                asio::redirect_error(asio::use_awaitable, ec));
      {
        std::lock_guard lock(idle_mu_);
        idle_.erase(id);
      }
      auto start = std::chrono::steady_clock::now();
      if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
          ec == asio::error::connection_reset || ec == asio::error::eof ||
          ec == asio::error::operation_aborted) {
        break;
      }
      std::string request_id = Uuid::Random().ToString();
      http::response<http::string_body> res;
      bool keep_alive = false;
      if (ec) {
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

        HttpResponse out = handler_(r);  // inline: this thread serves nothing else meanwhile
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
      stream.expires_after(std::chrono::seconds(options_.idle_timeout_seconds));
      co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
      if (ec || !keep_alive) break;
    }
    boost::system::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
    --active_sessions_;
  }

  static void LogRequest(std::string_view method, std::string_view path, int status,
                         std::chrono::steady_clock::time_point start,
                         const std::string& request_id) {
    double latency_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    LogEvent("info", "request",
             {{"method", method},
              {"path", path},
              {"status", status},
              {"latency_ms", latency_ms},
              {"request_id", request_id}});
  }

  HttpServerOptions options_;
  HttpHandler handler_;
  asio::io_context ioc_;
  asio::strand<asio::io_context::executor_type> accept_strand_;
  tcp::acceptor acceptor_;
  std::vector<std::thread> threads_;
  uint16_t port_ = 0;
  std::atomic<bool> stopped_{false};
  std::atomic<bool> stopping_{false};
  std::mutex idle_mu_;
  std::map<uint64_t, Idle> idle_;  // sessions waiting for their next request, by session id
  std::atomic<uint64_t> next_session_id_{1};
  std::atomic<int> active_sessions_{0};
};

}  // namespace

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                      HttpHandler handler) {
  auto server = std::make_unique<BeastServer>(options, std::move(handler));
  FP_CHECK_OK(server->Bind());
  return std::unique_ptr<HttpServer>(std::move(server));
}

}  // namespace fp::api
