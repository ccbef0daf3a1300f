#include "agents/linux/netns.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

extern char** environ;

namespace fp::agents::dataplane {

Result<std::unique_ptr<NetnsThread>> NetnsThread::Start(const std::string& name) {
  int fd = -1;
  if (!name.empty()) {
    if (name.find('/') != std::string::npos || name == "." || name == "..") {
      return Fail(Error::InvalidRequest(fmt::format("network namespace name \"{}\"", name)));
    }
    fd = open(("/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) {
        return Fail(Error::NotFound(fmt::format(
            "network namespace \"{}\" (no /run/netns/{}; is the lab up?)", name, name)));
      }
      return Fail(Error::Internal(
          fmt::format("cannot open network namespace \"{}\": {}", name, std::strerror(errno))));
    }
  }
  std::unique_ptr<NetnsThread> t(new NetnsThread(name));
  std::promise<Status> started;
  auto ready = started.get_future();
  t->thread_ = std::thread([self = t.get(), fd, &started] { self->Loop(fd, started); });
  Status entered = ready.get();
  if (!entered) return Fail(entered.error());  // the thread has ended; the destructor joins
  return t;
}

void NetnsThread::Loop(int netns_fd, std::promise<Status>& started) {
  if (netns_fd >= 0) {
    int rc = setns(netns_fd, CLONE_NEWNET);
    int error = errno;
    close(netns_fd);
    if (rc != 0) {
      started.set_value(Fail(Error::Internal(
          fmt::format("cannot enter network namespace \"{}\": {}", name_, std::strerror(error)))));
      return;
    }
  }
  started.set_value(Ok());
  MutexLock lock(mu_);
  for (;;) {
    lock.Wait(cv_, [&]() FP_REQUIRES(mu_) { return stop_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stopping, nothing left
    auto task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.Unlock();
    task();
    lock.Lock();
  }
}

NetnsThread::~NetnsThread() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status NetnsThread::Run(const std::function<Status()>& fn) {
  std::promise<Status> done;
  auto result = done.get_future();
  {
    MutexLock lock(mu_);
    if (stop_) return Fail(Error::Internal("the namespace thread has stopped"));
    tasks_.emplace_back([&] { done.set_value(fn()); });
  }
  cv_.notify_one();
  return result.get();
}

namespace {

// Reads `fd` to its end.
std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n = 0;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

}  // namespace

Result<std::string> RunCommandOutput(const std::vector<std::string>& argv) {
  if (argv.empty()) return Fail(Error::Internal("no command to run"));
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int out_pipe[2];
  int err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    return Fail(Error::Internal(fmt::format("pipe: {}", std::strerror(errno))));
  }
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    return Fail(Error::Internal(fmt::format("pipe: {}", std::strerror(errno))));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  std::string output;
  std::string errors;
  if (rc == 0) {
    // Small outputs (ip's): the error pipe is read after the output pipe reaches its end.
    output = ReadAll(out_pipe[0]);
    errors = ReadAll(err_pipe[0]);
  }
  close(out_pipe[0]);
  close(err_pipe[0]);
  std::string command = fmt::format("{}", fmt::join(argv, " "));
  if (rc != 0) {
    return Fail(Error::Internal(fmt::format("cannot run `{}`: {}", command, std::strerror(rc))));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return output;
  while (!errors.empty() && (errors.back() == '\n' || errors.back() == ' ')) errors.pop_back();
  return Fail(Error::Internal(fmt::format("`{}` failed (status {}): {}", command, status, errors)));
}

Status RunCommand(const std::vector<std::string>& argv) {
  FP_TRY(RunCommandOutput(argv));
  return Ok();
}

}  // namespace fp::agents::dataplane
