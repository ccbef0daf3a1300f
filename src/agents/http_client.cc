// With src/api/http_server.cc, the only translation units that include Boost.Beast/Asio.

#include "agents/http_client.h"

#include <fmt/format.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <mutex>
#include <vector>

namespace fp::agents {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

// Agents answer with at most a full NAT table (100,000 entries is about 15 MB of JSON).
constexpr uint64_t kAnswerBodyLimit = 256ull << 20;
// Idle keep-alive connections kept per client; more concurrent calls open more, and the
// surplus is closed when they finish.
constexpr size_t kMaxIdleConnections = 8;

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
  PeerAddress out;
  std::string_view port;
  if (rest.front() == '[') {
    size_t close = rest.find(']');
    if (close == std::string_view::npos) return malformed();
    out.host = std::string(rest.substr(1, close - 1));
    std::string_view after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return malformed();
      port = after.substr(1);
    }
  } else {
    size_t colon = rest.rfind(':');
    out.host = std::string(rest.substr(0, colon));
    if (colon != std::string_view::npos) port = rest.substr(colon + 1);
  }
  if (out.host.empty()) return malformed();
  if (port.empty()) port = "80";
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos ||
      std::stoi(std::string(port)) > 65535) {
    return malformed();
  }
  out.port = std::string(port);
  out.host_header = std::string(rest);
  return out;
}

// One connection with its own I/O context, so that a call runs its I/O on the calling thread
// and a deadline can cut it short. Used by one call at a time.
struct Connection {
  asio::io_context ioc{1};
  tcp::socket socket{ioc};
  beast::flat_buffer buffer;
  bool reused = false;
};

// How one step of a call ended.
struct StepOutcome {
  bool timed_out = false;
  boost::system::error_code ec;
};

// Starts an asynchronous operation with `start(handler)` and runs the connection's I/O until
// it completes or `deadline` passes. On the deadline the socket (and `resolver`, if any) is
// cancelled, so the operation finishes at once with operation_aborted.
template <typename Start>
StepOutcome RunStep(Connection& conn, Clock::time_point deadline, Start&& start,
                    tcp::resolver* resolver = nullptr) {
  StepOutcome outcome;
  bool done = false;
  start([&](boost::system::error_code ec, auto&&...) {
    outcome.ec = ec;
    done = true;
  });
  conn.ioc.restart();
  conn.ioc.run_until(deadline);
  if (!done) {
    boost::system::error_code ignored;
    if (resolver != nullptr) resolver->cancel();
    conn.socket.close(ignored);
    conn.ioc.restart();
    conn.ioc.run();
    outcome.timed_out = true;
  }
  return outcome;
}

// True when a reused keep-alive connection failed in a way that means the peer had closed it
// before it saw our request; the call is then repeated once on a fresh connection.
bool IsStaleConnection(const boost::system::error_code& ec) {
  return ec == http::error::end_of_stream || ec == asio::error::eof ||
         ec == asio::error::connection_reset || ec == asio::error::broken_pipe ||
         ec == asio::error::connection_aborted;
}

}  // namespace

struct HttpClient::Impl {
  std::string peer;
  std::string base_url;
  std::string description;
  std::chrono::milliseconds timeout;
  Result<PeerAddress> address;

  std::mutex mu;
  std::vector<std::unique_ptr<Connection>> idle;  // guarded by mu

  Impl(std::string peer_name, std::string url, std::chrono::milliseconds call_timeout)
      : peer(std::move(peer_name)),
        base_url(std::move(url)),
        description(fmt::format("{} at {}", peer, base_url)),
        timeout(call_timeout),
        address(ParseBaseUrl(base_url, description)) {}

  Error TimedOut() const {
    return Error::Unavailable(
        fmt::format("{} did not answer within {} ms", description, timeout.count()));
  }
  Error Unreachable(std::string_view what, const boost::system::error_code& ec) const {
    return Error::Unavailable(fmt::format("{}: {}: {}", description, what, ec.message()));
  }

  std::unique_ptr<Connection> TakeIdle() {
    std::lock_guard lock(mu);
    if (idle.empty()) return nullptr;
    auto conn = std::move(idle.back());
    idle.pop_back();
    return conn;
  }

  void ReturnIdle(std::unique_ptr<Connection> conn) {
    conn->reused = true;
    std::lock_guard lock(mu);
    if (idle.size() < kMaxIdleConnections) idle.push_back(std::move(conn));
  }

  Result<std::unique_ptr<Connection>> Connect(Clock::time_point deadline) {
    auto conn = std::make_unique<Connection>();
    tcp::resolver resolver(conn->ioc);
    std::vector<tcp::endpoint> endpoints;
    boost::system::error_code ec;
    auto numeric = asio::ip::make_address(address->host, ec);
    if (!ec) {
      endpoints.emplace_back(numeric, static_cast<uint16_t>(std::stoi(address->port)));
    } else {
      auto resolved = RunStep(
          *conn, deadline,
          [&](auto handler) {
            resolver.async_resolve(
                address->host, address->port,
                [&endpoints, handler](boost::system::error_code e,
                                      const tcp::resolver::results_type& results) mutable {
                  for (const auto& entry : results) endpoints.push_back(entry.endpoint());
                  handler(e);
                });
          },
          &resolver);
      if (resolved.timed_out) return Fail(TimedOut());
      if (resolved.ec) return Fail(Unreachable("cannot resolve " + address->host, resolved.ec));
    }
    auto connected = RunStep(*conn, deadline, [&](auto handler) {
      asio::async_connect(conn->socket, endpoints, handler);
    });
    if (connected.timed_out) return Fail(TimedOut());
    if (connected.ec) return Fail(Unreachable("cannot connect", connected.ec));
    conn->socket.set_option(tcp::no_delay(true), ec);
    return conn;
  }

  // One request/answer exchange on `conn`. `stale` is set when a reused connection turned out
  // to be closed by the peer before it read the request.
  Result<HttpAnswer> Exchange(Connection& conn, const http::request<http::string_body>& request,
                              Clock::time_point deadline, bool& stale, bool& keep_alive) {
    stale = false;
    auto written = RunStep(conn, deadline,
                           [&](auto handler) { http::async_write(conn.socket, request, handler); });
    if (written.timed_out) return Fail(TimedOut());
    if (written.ec) {
      stale = conn.reused && IsStaleConnection(written.ec);
      return Fail(Unreachable("connection lost while sending the request", written.ec));
    }
    http::response_parser<http::string_body> parser;
    parser.body_limit(kAnswerBodyLimit);
    auto read = RunStep(conn, deadline, [&](auto handler) {
      http::async_read(conn.socket, conn.buffer, parser, handler);
    });
    if (read.timed_out) return Fail(TimedOut());
    if (read.ec) {
      stale = conn.reused && IsStaleConnection(read.ec) && !parser.got_some();
      return Fail(Unreachable("no valid answer", read.ec));
    }
    auto& response = parser.get();
    keep_alive = response.keep_alive();
    return HttpAnswer{static_cast<int>(response.result_int()), std::move(response.body())};
  }
};

HttpClient::HttpClient(std::string peer, std::string base_url, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>(std::move(peer), std::move(base_url), timeout)) {}

HttpClient::~HttpClient() = default;

const std::string& HttpClient::base_url() const { return impl_->base_url; }
const std::string& HttpClient::description() const { return impl_->description; }

Result<HttpAnswer> HttpClient::Call(
    std::string_view method, std::string_view target, std::string_view body,
    const std::vector<std::pair<std::string, std::string>>& headers) {
  Impl& impl = *impl_;
  if (!impl.address) return Fail(impl.address.error());
  auto deadline = Clock::now() + impl.timeout;

  http::verb verb = http::string_to_verb(method);
  if (verb == http::verb::unknown) {
    return Fail(
        Error::Internal(fmt::format("{}: unknown HTTP method {}", impl.description, method)));
  }
  http::request<http::string_body> request{verb, target, 11};
  request.set(http::field::host, impl.address->host_header);
  request.set(http::field::user_agent, "floatplane");
  if (!body.empty()) {
    request.set(http::field::content_type, "application/json");
    request.body() = std::string(body);
  }
  for (const auto& [name, value] : headers) request.set(name, value);
  request.keep_alive(true);
  request.prepare_payload();

  std::unique_ptr<Connection> conn = impl.TakeIdle();
  for (;;) {
    if (!conn) conn = FP_TRY(impl.Connect(deadline));
    bool stale = false;
    bool keep_alive = false;
    auto answer = impl.Exchange(*conn, request, deadline, stale, keep_alive);
    if (!answer) {
      if (stale) {
        conn.reset();
        continue;
      }
      return answer;
    }
    if (keep_alive) impl.ReturnIdle(std::move(conn));
    return answer;
  }
}

}  // namespace fp::agents
