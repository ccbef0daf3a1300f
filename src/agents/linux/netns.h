#pragma once

// Work inside another network namespace without moving the process there: the Linux agents
// serve HTTP on the host's loopback and program the dataplane of the namespace they are given
// (scripts/lab's P-sw, P-sled0, ...).

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/mutex.h"

namespace fp::agents::dataplane {

// A thread that lives in a network namespace and runs the functions given to it, one at a
// time, in order. Netlink sockets opened there (libnftables' among them) belong to that
// namespace, and so do processes started from it (the child of a fork inherits the calling
// thread's namespace). Thread-safe.
class NetnsThread {
 public:
  // Enters the namespace `name` (a file under /run/netns, as `ip netns add` makes), or stays in
  // the caller's when `name` is empty. Errors: NotFound for a namespace that does not exist,
  // Internal when it cannot be entered (e.g. without CAP_SYS_ADMIN).
  static Result<std::unique_ptr<NetnsThread>> Start(const std::string& name);
  ~NetnsThread();
  NetnsThread(const NetnsThread&) = delete;
  NetnsThread& operator=(const NetnsThread&) = delete;

  // Runs `fn` on the thread and returns its status once it has run.
  Status Run(const std::function<Status()>& fn);
  const std::string& name() const { return name_; }

 private:
  explicit NetnsThread(std::string name) : name_(std::move(name)) {}
  void Loop(int netns_fd, std::promise<Status>& started);

  const std::string name_;
  Mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_ FP_GUARDED_BY(mu_);
  bool stop_ FP_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// Runs `argv` (no shell: every argument is passed as it is) from the calling thread, so in its
// network namespace, and waits for it. Errors: Internal naming the command and its exit status
// and error output when it does not exit 0.
Status RunCommand(const std::vector<std::string>& argv);
// The same, returning what the command wrote on its standard output.
Result<std::string> RunCommandOutput(const std::vector<std::string>& argv);

}  // namespace fp::agents::dataplane
