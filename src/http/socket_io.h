#pragma once

// HTTP/1.1 message I/O over a socket, plain or TLS (http/tls.h), shared by the HTTP server and
// the agents' HTTP client. Beast parses and serializes. The blocking calls bound every wait with
// poll() and a deadline, so the calling thread does the I/O itself; ParseBuffered serves an event
// loop that reads without waiting. Include only from the server's files (via event_server.h) and
// client.cc (Beast is slow to compile).

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <chrono>
#include <string_view>

#include "common/clock.h"
#include "http/tls.h"

namespace fp::http::socket_io {

// Deadlines are on `clock`: poll waits in the kernel for the time the clock says is left, and
// the deadline has passed only when the clock says so (a test's clock that does not move keeps
// a wait going until the socket is ready).

// Milliseconds left until `deadline`, rounded up, at least 0.
inline int MillisLeft(const Clock& clock, MonoTime deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(clock.Left(deadline));
  return static_cast<int>(left.count());
}

// Waits until `fd` is ready for `events` or the deadline passes. False on timeout (errno
// ETIMEDOUT) or error (errno set by poll).
inline bool WaitReady(const Clock& clock, int fd, short events, MonoTime deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, MillisLeft(clock, deadline));
    if (n > 0) return true;
    if (n == 0) {
      if (clock.Monotonic() < deadline) continue;  // poll's clock is coarser than ours
      errno = ETIMEDOUT;
      return false;
    }
    if (errno != EINTR) return false;
  }
}

// Sends all of `data`. False with errno set (ETIMEDOUT when the peer stopped reading until the
// deadline, EPIPE/ECONNRESET when it is gone).
inline bool SendAll(const Clock& clock, Stream s, std::string_view data, MonoTime deadline) {
  while (!data.empty()) {
    short wait = POLLOUT;
    ssize_t n = SendSome(s, data.data(), data.size(), wait);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EAGAIN && WaitReady(clock, s.fd, wait, deadline)) continue;
    return false;
  }
  return true;
}

enum class ReadOutcome {
  kMessage,    // a complete message is in the parser
  kClosed,     // the peer closed or reset the connection (`ec` empty) before a whole message
  kTimedOut,   // nothing complete arrived before the deadline
  kMalformed,  // not HTTP, or over a limit: `ec` says which
};

enum class ParseOutcome {
  kMessage,    // a complete message is in the parser
  kNeedMore,   // every buffered byte was used and the message is not complete yet
  kMalformed,  // not HTTP, or over a limit: `ec` says which
};

// Feeds the bytes `buffer` holds to `parser` and consumes what it used; never touches a socket.
// Bytes after a complete message stay in `buffer` (the next pipelined message).
template <typename Parser>
ParseOutcome ParseBuffered(boost::beast::flat_buffer& buffer, Parser& parser,
                           boost::beast::error_code& ec) {
  namespace beast_http = boost::beast::http;
  parser.eager(true);
  while (buffer.size() > 0 && !parser.is_done()) {
    size_t used = parser.put(buffer.data(), ec);
    buffer.consume(used);
    if (ec == beast_http::error::need_more) {
      ec = {};
      break;
    }
    if (ec) return ParseOutcome::kMalformed;
  }
  return parser.is_done() ? ParseOutcome::kMessage : ParseOutcome::kNeedMore;
}

// Reads one message from `s` into `parser`, starting with the bytes `buffer` kept from the
// previous message on this connection. On kClosed, parser.got_some() tells whether the peer
// closed between messages or in the middle of one. On kTimedOut the parser keeps what arrived,
// so a later call (or another reader) can go on where this one stopped.
template <typename Parser>
ReadOutcome ReadMessage(const Clock& clock, Stream s, boost::beast::flat_buffer& buffer,
                        Parser& parser, MonoTime deadline, boost::beast::error_code& ec) {
  short wait = POLLIN;
  for (;;) {
    switch (ParseBuffered(buffer, parser, ec)) {
      case ParseOutcome::kMessage:
        return ReadOutcome::kMessage;
      case ParseOutcome::kMalformed:
        return ReadOutcome::kMalformed;
      case ParseOutcome::kNeedMore:
        break;
    }
    // TLS may hold bytes it read from the socket already: the socket would not wake us.
    if (!HasBuffered(s) && !WaitReady(clock, s.fd, wait, deadline)) {
      return errno == ETIMEDOUT ? ReadOutcome::kTimedOut : ReadOutcome::kClosed;
    }
    auto space = buffer.prepare(16 << 10);
    ssize_t n = RecvSome(s, space.data(), space.size(), wait);
    if (n < 0) continue;  // `wait` says for what
    wait = POLLIN;
    if (n == 0) {
      if (parser.got_some()) {
        // A message whose length is "until the connection closes" ends here.
        parser.put_eof(ec);
        if (!ec && parser.is_done()) return ReadOutcome::kMessage;
      }
      ec = {};
      return ReadOutcome::kClosed;
    }
    buffer.commit(static_cast<size_t>(n));
  }
}

}  // namespace fp::http::socket_io
