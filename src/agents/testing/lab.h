#pragma once

// For the dataplane's packet tests: a lab (scripts/lab) of the test's own, and clients that
// run inside its namespaces.

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "agents/linux/netns.h"

namespace fp::agents::testing {

class Lab {
 public:
  explicit Lab(const std::string& tag) : prefix_(tag + std::to_string(getpid())) {
    auto up = dataplane::RunCommandOutput(
        {std::string(FP_SOURCE_DIR) + "/scripts/lab", "up", "--prefix", prefix_});
    ok_ = static_cast<bool>(up);
    if (!up) error_ = up.error().message();
  }
  ~Lab() {
    if (ok_) {
      (void)dataplane::RunCommand(
          {std::string(FP_SOURCE_DIR) + "/scripts/lab", "down", "--prefix", prefix_});
    }
  }
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  const std::string& prefix() const { return prefix_; }
  std::string ns(const std::string& role) const { return prefix_ + "-" + role; }

 private:
  std::string prefix_;
  bool ok_ = false;
  std::string error_;
};

inline Status InNs(const std::string& ns, std::vector<std::string> argv) {
  argv.insert(argv.begin(), {"ip", "netns", "exec", ns});
  return dataplane::RunCommand(argv);
}

// From namespace `ns`: a TCP connection to ip:port (UDP with `udp`: one datagram; from
// `source_port` when not 0, so that a test can reuse a flow) and the first line answered,
// within 2 s. Errors: Unavailable with the reason (refused, unreachable, timed out).
inline Result<std::string> Fetch(const std::string& ns, const std::string& ip, int port,
                                 bool udp = false, int source_port = 0) {
  auto thread = FP_TRY(dataplane::NetnsThread::Start(ns));
  std::string answer;
  FP_CHECK_OK(thread->Run([&]() -> Status {
    // The family from the address: IPv6 when it has a colon.
    const bool v6 = ip.find(':') != std::string::npos;
    sockaddr_storage to{};
    sockaddr_storage from{};
    socklen_t size = v6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    if (v6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&to);
      a->sin6_family = AF_INET6;
      a->sin6_port = htons(static_cast<uint16_t>(port));
      inet_pton(AF_INET6, ip.c_str(), &a->sin6_addr);
      auto* f = reinterpret_cast<sockaddr_in6*>(&from);
      f->sin6_family = AF_INET6;
      f->sin6_port = htons(static_cast<uint16_t>(source_port));
    } else {
      auto* a = reinterpret_cast<sockaddr_in*>(&to);
      a->sin_family = AF_INET;
      a->sin_port = htons(static_cast<uint16_t>(port));
      inet_pton(AF_INET, ip.c_str(), &a->sin_addr);
      auto* f = reinterpret_cast<sockaddr_in*>(&from);
      f->sin_family = AF_INET;
      f->sin_port = htons(static_cast<uint16_t>(source_port));
    }
    int fd = socket(v6 ? AF_INET6 : AF_INET,
                    (udp ? SOCK_DGRAM : SOCK_STREAM) | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return Fail(Error::Internal("socket"));
    if (source_port != 0) {
      int on = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
      if (bind(fd, reinterpret_cast<sockaddr*>(&from), size) != 0) {
        int error = errno;
        close(fd);
        return Fail(Error::Internal(fmt::format("bind: {}", std::strerror(error))));
      }
    }
    auto fail = [&](std::string why) -> Status {
      close(fd);
      return Fail(Error::Unavailable(fmt::format("{}:{} from {}: {}", ip, port, ns, why)));
    };
    int rc = connect(fd, reinterpret_cast<sockaddr*>(&to), size);
    if (rc != 0 && errno != EINPROGRESS) return fail(std::strerror(errno));
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, 2000) != 1) return fail("connect timed out");
    int error = 0;
    socklen_t len = sizeof error;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
    if (error != 0) return fail(std::strerror(error));
    if (udp && send(fd, "?", 1, 0) != 1) return fail(std::strerror(errno));
    p = {fd, POLLIN, 0};
    if (poll(&p, 1, 2000) != 1) return fail("no answer within 2 s");
    char buf[512];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return fail(n == 0 ? "closed without an answer" : std::strerror(errno));
    answer.assign(buf, static_cast<size_t>(n));
    close(fd);
    while (!answer.empty() && answer.back() == '\n') answer.pop_back();
    return Ok();
  }));
  return answer;
}

}  // namespace fp::agents::testing
