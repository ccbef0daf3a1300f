#include "agents/linux/responder.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace fp::agents::dataplane {

namespace {

std::string Peer(const sockaddr_storage& a) {
  char text[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    return fmt::format("{}:{}", text, ntohs(in->sin_port));
  }
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
  inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
  return fmt::format("[{}]:{}", text, ntohs(in6->sin6_port));
}

// A dual-stack socket of `type` bound to port `port` on every address.
Result<int> Bound(int type, int port) {
  int fd = socket(AF_INET6, type | SOCK_CLOEXEC, 0);
  if (fd < 0) return Fail(Error::Internal(fmt::format("socket: {}", std::strerror(errno))));
  int off = 0;
  int on = 1;
  setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_port = htons(static_cast<uint16_t>(port));
  a.sin6_addr = in6addr_any;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      (type == SOCK_STREAM && listen(fd, 64) != 0)) {
    int error = errno;
    close(fd);
    return Fail(
        Error::Internal(fmt::format("cannot listen on port {}: {}", port, std::strerror(error))));
  }
  return fd;
}

std::string Unmapped(std::string peer) {
  // A dual-stack socket shows IPv4 clients as ::ffff:a.b.c.d.
  constexpr std::string_view kMapped = "[::ffff:";
  if (peer.rfind(kMapped, 0) == 0) {
    size_t close = peer.find(']');
    return peer.substr(kMapped.size(), close - kMapped.size()) + peer.substr(close + 1);
  }
  return peer;
}

}  // namespace

Result<std::unique_ptr<Responder>> Responder::Start(const std::string& netns,
                                                    const std::string& hostname, int port) {
  std::unique_ptr<Responder> r(new Responder(hostname));
  auto in_ns = FP_TRY(NetnsThread::Start(netns));
  FP_CHECK_OK(in_ns->Run([&]() -> Status {
    r->tcp_ = FP_TRY(Bound(SOCK_STREAM, port));
    r->udp_ = FP_TRY(Bound(SOCK_DGRAM, port));
    return Ok();
  }));
  if (pipe2(r->wake_, O_CLOEXEC) != 0) {
    return Fail(Error::Internal(fmt::format("pipe: {}", std::strerror(errno))));
  }
  r->thread_ = std::thread([raw = r.get()] { raw->Serve(); });
  return r;
}

Responder::~Responder() {
  if (wake_[1] >= 0) (void)!write(wake_[1], "x", 1);
  if (thread_.joinable()) thread_.join();
  for (int fd : {tcp_, udp_, wake_[0], wake_[1]}) {
    if (fd >= 0) close(fd);
  }
}

void Responder::Serve() {
  for (;;) {
    pollfd fds[3] = {{tcp_, POLLIN, 0}, {udp_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (poll(fds, 3, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[2].revents != 0) return;
    if (fds[0].revents & POLLIN) {
      sockaddr_storage peer{};
      socklen_t len = sizeof peer;
      int c = accept4(tcp_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC);
      if (c >= 0) {
        // What the client sends first (an HTTP request from curl) is read and dropped, briefly
        // waited for: closing with it unread would reset the connection under the answer.
        pollfd in{c, POLLIN, 0};
        if (poll(&in, 1, 200) == 1) {
          char request[2048];
          (void)!recv(c, request, sizeof request, MSG_DONTWAIT);
        }
        std::string line = fmt::format("host={} client={}\n", hostname_, Unmapped(Peer(peer)));
        (void)!send(c, line.data(), line.size(), MSG_NOSIGNAL);
        answered_.fetch_add(1);
        shutdown(c, SHUT_WR);
        close(c);
      }
    }
    if (fds[1].revents & POLLIN) {
      sockaddr_storage peer{};
      socklen_t len = sizeof peer;
      char buf[1500];
      ssize_t n = recvfrom(udp_, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&peer), &len);
      if (n >= 0) {
        std::string line = fmt::format("host={} client={}\n", hostname_, Unmapped(Peer(peer)));
        (void)!sendto(udp_, line.data(), line.size(), 0, reinterpret_cast<sockaddr*>(&peer), len);
        answered_.fetch_add(1);
      }
    }
  }
}

}  // namespace fp::agents::dataplane
