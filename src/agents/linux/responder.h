#pragma once

// The stand-in for a VM's service: on TCP and UDP port 80 of its namespace it answers every
// connection or datagram with one line, "host=<hostname> client=<address>:<port>\n", so that a
// packet test sees which instance answered and which source address reached it.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "agents/linux/netns.h"
#include "common/error.h"

namespace fp::agents::dataplane {

class Responder {
 public:
  // Listens in network namespace `netns` (its sockets are made there) and serves until
  // destroyed. Errors: those of NetnsThread::Start, Internal when a socket cannot listen.
  static Result<std::unique_ptr<Responder>> Start(const std::string& netns,
                                                  const std::string& hostname, int port = 80);
  ~Responder();
  Responder(const Responder&) = delete;
  Responder& operator=(const Responder&) = delete;

  // Connections and datagrams it has answered so far (what reached the instance).
  int64_t answered() const { return answered_.load(); }

 private:
  Responder(std::string hostname) : hostname_(std::move(hostname)) {}
  void Serve();

  const std::string hostname_;
  int tcp_ = -1;
  int udp_ = -1;
  int wake_[2] = {-1, -1};  // a pipe: written to stop Serve
  std::atomic<int64_t> answered_{0};
  std::thread thread_;
};

}  // namespace fp::agents::dataplane
