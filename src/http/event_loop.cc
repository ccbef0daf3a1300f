// The event loop: accepts connections within the bounds, reads requests without blocking,
// enforces the request and idle deadlines, and hands complete requests to the workers.

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>

#include "common/log.h"
#include "http/event_server.h"

namespace fp::http::detail {

namespace {

// The peer's address as text (an IPv4-mapped IPv6 address as IPv4).
std::string PeerAddress(const sockaddr_storage& peer) {
  char text[INET6_ADDRSTRLEN] = {};
  if (peer.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&peer)->sin_addr, text, sizeof text);
  } else if (peer.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&peer)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a)) {
      ::inet_ntop(AF_INET, &a.s6_addr[12], text, sizeof text);
    } else {
      ::inet_ntop(AF_INET6, &a, text, sizeof text);
    }
  }
  return text;
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

}  // namespace

void EventServer::Loop() {
  epoll_event events[256];
  TimePoint next_sweep = clock_.Monotonic() + kSweepPeriod;
  while (!stopping_) {
    int n = ::epoll_wait(epoll_fd_, events, 256,
                         buffered_.empty() ? socket_io::MillisLeft(clock_, next_sweep) : 0);
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
    ReadBuffered();
    if (clock_.Monotonic() >= next_sweep) {
      Sweep();
      next_sweep = clock_.Monotonic() + kSweepPeriod;
    }
  }
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
  for (auto& [id, conn] : parked_) Close(*conn);
  parked_.clear();
  {
    // From now on workers close the connections they would hand back (also after an
    // epoll_wait failure, when nothing would take them).
    MutexLock lock(mu_);
    loop_done_ = true;
    for (auto& conn : returned_) CloseLocked(*conn);
    returned_.clear();
  }
  while (!draining_.empty()) EndDrain(draining_.begin());
}

void EventServer::AcceptAll() {
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
      MutexLock lock(mu_);
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
      RefuseAndDrain(fd, ErrorWire(random_, 503, "ServiceUnavailable", *refusal));
      continue;
    }
    // (The TLS handshake is read like a request, in OnReadable.)
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto conn = std::make_unique<Conn>();
    conn->id = next_id_++;
    conn->fd = fd;
    if (options_.tls) conn->tls = options_.tls->NewSession(fd);
    conn->client = std::move(client);
    conn->address = PeerAddress(peer);
    conn->NextRequest(options_, clock_.Monotonic());
    Park(std::move(conn));
  }
}

void EventServer::RefuseAndDrain(int fd, std::string wire) {
  Drain drain{.deadline = clock_.Monotonic() + kDrainTime};
  if (options_.tls) {
    // A TLS client reads the answer only after its handshake, which may take it a while.
    drain.deadline =
        clock_.Monotonic() + std::max<TimePoint::duration>(kDrainTime, options_.request_timeout);
    drain.tls = options_.tls->NewSession(fd);
    drain.unsent = std::move(wire);
  } else {
    (void)!::send(fd, wire.data(), wire.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::shutdown(fd, SHUT_WR);
  }
  if (draining_.size() >= max_draining_ ||
      !Watch(fd, kDrainBit | static_cast<uint64_t>(fd), EPOLL_CTL_ADD)) {
    socket_io::EndTls(drain.tls);
    ::close(fd);
    return;
  }
  draining_[fd] = std::move(drain);
}

void EventServer::DrainSome(int fd) {
  auto it = draining_.find(fd);
  if (it == draining_.end()) return;
  Drain& d = it->second;
  if (d.tls != nullptr) {
    short wait = POLLIN;
    ssize_t n =
        socket_io::SendSome({.fd = fd, .tls = d.tls}, d.unsent.data(), d.unsent.size(), wait);
    if (n < 0 && errno == EAGAIN) {
      Watch(fd, kDrainBit | static_cast<uint64_t>(fd), EPOLL_CTL_MOD, wait == POLLOUT);
      return;
    }
    if (n > 0) d.unsent.erase(0, static_cast<size_t>(n));
    if (n > 0 && !d.unsent.empty()) return;  // the rest when the socket takes it
    if (n <= 0) {
      EndDrain(it);
      return;
    }
    // Answered: the rest of what the client sends is read as it comes, without decrypting.
    socket_io::EndTls(d.tls);
    ::shutdown(fd, SHUT_WR);
    Watch(fd, kDrainBit | static_cast<uint64_t>(fd), EPOLL_CTL_MOD);
  }
  char scratch[4096];
  for (;;) {
    ssize_t n = ::recv(fd, scratch, sizeof scratch, MSG_DONTWAIT);
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    break;
  }
  EndDrain(it);
}

void EventServer::EndDrain(std::map<int, Drain>::iterator it) {
  socket_io::EndTls(it->second.tls);
  ::close(it->first);  // closing removes it from the epoll set
  draining_.erase(it);
}

void EventServer::SendNow(const Conn& c, const std::string& wire) {
  short wait = POLLOUT;
  (void)socket_io::SendSome(c.stream(), wire.data(), wire.size(), wait);
}

void EventServer::Park(std::unique_ptr<Conn> conn) {
  if (!Watch(conn->fd, conn->id, EPOLL_CTL_ADD)) {
    Close(*conn);
    return;
  }
  conn->waits_to_send = false;
  uint64_t id = conn->id;
  if (socket_io::HasBuffered(conn->stream())) buffered_.push_back(id);
  parked_[id] = std::move(conn);
}

void EventServer::TakeReturned() {
  std::vector<std::unique_ptr<Conn>> back;
  {
    MutexLock lock(mu_);
    back.swap(returned_);
  }
  for (auto& conn : back) Park(std::move(conn));
}

void EventServer::OnReadable(uint64_t id) {
  auto it = parked_.find(id);
  if (it == parked_.end()) return;
  Conn& c = *it->second;
  // At most 128 KiB per wake-up, so one fast sender cannot hold the loop; level-triggered
  // epoll reports the rest next round (and ReadBuffered what TLS read ahead).
  for (int round = 0; round < 8; ++round) {
    auto space = c.buffer.prepare(16 << 10);
    short wait = POLLIN;
    ssize_t n = socket_io::RecvSome(c.stream(), space.data(), space.size(), wait);
    if (n < 0) {
      // Nothing yet. A TLS handshake may have to send before it can read on.
      if ((wait == POLLOUT) != c.waits_to_send) {
        c.waits_to_send = wait == POLLOUT;
        Watch(c.fd, c.id, EPOLL_CTL_MOD, c.waits_to_send);
      }
      return;
    }
    if (n == 0) {
      // Closed or reset; a request cut off here is not answered (nobody would read it).
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
      Close(c);
      parked_.erase(it);
      return;
    }
    if (c.waits_to_send) {
      c.waits_to_send = false;
      Watch(c.fd, c.id, EPOLL_CTL_MOD);
    }
    c.buffer.commit(static_cast<size_t>(n));
    if (!c.request_began) c.request_began = clock_.Monotonic();
    if (socket_io::ParseBuffered(c.buffer, *c.parser, c.parse_error) != ParseOutcome::kNeedMore) {
      std::unique_ptr<Conn> conn = std::move(it->second);
      parked_.erase(it);
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, conn->fd, nullptr);
      Dispatch(std::move(conn));
      return;
    }
  }
  if (socket_io::HasBuffered(c.stream())) buffered_.push_back(id);
}

void EventServer::ReadBuffered() {
  if (buffered_.empty()) return;
  std::vector<uint64_t> ids;
  ids.swap(buffered_);
  for (uint64_t id : ids) OnReadable(id);
}

void EventServer::Sweep() {
  TimePoint now = clock_.Monotonic();
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
      std::string wire = ErrorWire(random_, 408, "RequestTimeout",
                                   fmt::format("the request did not arrive completely within {} ms",
                                               options_.request_timeout.count()));
      SendNow(c, wire);
    }
    Close(c);
    it = parked_.erase(it);
  }
  for (auto it = draining_.begin(); it != draining_.end();) {
    auto next = std::next(it);
    if (now >= it->second.deadline) EndDrain(it);
    it = next;
  }
  if (accept_paused_ && Watch(listen_fd_, kListenTag, EPOLL_CTL_ADD)) accept_paused_ = false;
  LogAdmission(now);
}

void EventServer::LogAdmission(TimePoint now) {
  int64_t total = refused_over_capacity_ + refused_per_client_ + refused_busy_ + request_timeouts_;
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

}  // namespace fp::http::detail
