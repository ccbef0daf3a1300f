#include "cmd/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <malloc.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>

#include "common/log.h"
#include "common/thread_name.h"

namespace fp::cmd {

void TuneAllocator() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables && std::string_view(tunables).find("glibc.malloc.") != std::string_view::npos) {
    return;
  }
  mallopt(M_MMAP_THRESHOLD, 16 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
}

AllocatorTrimmer::Allocator AllocatorTrimmer::Glibc() {
  return {.free_bytes = [] { return mallinfo2().fordblks; }, .trim = [] { malloc_trim(0); }};
}

AllocatorTrimmer::AllocatorTrimmer(const Clock& clock, std::chrono::milliseconds period,
                                   size_t keep, Allocator allocator)
    : clock_(clock), period_(period), keep_(keep), allocator_(std::move(allocator)) {
  // The first look a period after construction, then one a period after each look.
  thread_ = std::thread([this, next = clock_.Deadline(period_)]() mutable {
    NameThisThread("malloc-trim");
    MutexLock lock(mu_);
    while (!clock_.WaitUntil(lock, cv_, next, [&]() FP_REQUIRES(mu_) { return stop_; })) {
      lock.Unlock();
      TrimIfAbove();
      lock.Lock();
      next = clock_.Deadline(period_);
    }
  });
}

AllocatorTrimmer::~AllocatorTrimmer() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool AllocatorTrimmer::TrimIfAbove() {
  const size_t free = allocator_.free_bytes();
  {
    MutexLock lock(mu_);
    // What a trim leaves counted as free (pages handed back inside a chunk still count, and
    // some cannot be handed back) is the floor: only what grew beyond it is worth a trim.
    if (free <= keep_ + after_last_trim_) return false;
  }
  allocator_.trim();
  const size_t left = allocator_.free_bytes();
  MutexLock lock(mu_);
  after_last_trim_ = left;
  ++trims_;
  return true;
}

int64_t AllocatorTrimmer::trims() const {
  MutexLock lock(mu_);
  return trims_;
}

void RaiseDescriptorLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &limit);
  }
}

// Accepts HOST:PORT, with IPv6 hosts in brackets ([::1]:8080).
Result<fp::http::HostPort> ParseListen(const std::string& text) {
  auto address = fp::http::ParseHostPort(text);
  if (!address) {
    return fp::Fail(
        Error::InvalidRequest(fmt::format("--listen \"{}\": {}", text, address.error().message())));
  }
  // An address to bind, not a name to resolve: refused here, naming the flag, rather than by
  // the bind after the database was opened.
  in6_addr scratch{};
  if (::inet_pton(AF_INET, address->host.c_str(), &scratch) != 1 &&
      ::inet_pton(AF_INET6, address->host.c_str(), &scratch) != 1) {
    return fp::Fail(Error::InvalidRequest(
        fmt::format("--listen \"{}\": the host must be an IPv4 or IPv6 address, e.g. "
                    "127.0.0.1:12220 or [::1]:12220",
                    text)));
  }
  return address;
}

Status WriteSecretFile(const std::filesystem::path& path, const std::string& content) {
  std::string tmp = path.string() + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return fp::Fail(Error::Internal(fmt::format("cannot write {}", tmp)));
  bool ok = ::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size()) &&
            ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    return fp::Fail(Error::Internal(fmt::format("cannot write {}", path.string())));
  }
  return fp::Ok();
}

namespace {

// This process's command line, its arguments separated by spaces.
std::string OwnCommandLine() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!raw.empty() && raw.back() == '\0') raw.pop_back();
  for (char& c : raw) {
    if (c == '\0') c = ' ';
  }
  return raw;
}

}  // namespace

Result<ExclusiveHold> ExclusiveHold::Take(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return Fail(
        Error::Internal(fmt::format("cannot open {}: {}", path.string(), std::strerror(errno))));
  }
  ExclusiveHold hold(fd);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    std::string holder;
    char buf[4096];
    ssize_t n = ::pread(fd, buf, sizeof buf, 0);
    if (n > 0) holder.assign(buf, static_cast<size_t>(n));
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    if (err != EWOULDBLOCK) {
      return Fail(
          Error::Internal(fmt::format("cannot lock {}: {}", path.string(), std::strerror(err))));
    }
    return Fail(Error::Unavailable(
        fmt::format("{} is held by another process ({})", path.string(),
                    holder.empty() ? std::string("it has not written its pid yet") : holder)));
  }
  std::string me = fmt::format("pid {}: {}\n", ::getpid(), OwnCommandLine());
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    return Fail(
        Error::Internal(fmt::format("cannot write {}: {}", path.string(), std::strerror(errno))));
  }
  return hold;
}

ExclusiveHold::~ExclusiveHold() {
  if (fd_ >= 0) ::close(fd_);  // the kernel drops the flock with the last descriptor
}

sigset_t BlockStopSignals(bool reload) {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  if (reload) sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return stop_signals;
}

StopSignalWatch::StopSignalWatch(std::function<void()> on_signal)
    : on_signal_(std::move(on_signal)) {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  signals_ = ::signalfd(-1, &stop, SFD_CLOEXEC | SFD_NONBLOCK);
  wake_ = ::eventfd(0, EFD_CLOEXEC);
  halt_ = ::eventfd(0, EFD_CLOEXEC);
  done_ = ::eventfd(0, EFD_CLOEXEC);
  // Without them the signals stay pending, as before the watch: WaitForStopSignal takes them.
  if (signals_ >= 0 && wake_ >= 0 && halt_ >= 0 && done_ >= 0) {
    thread_ = std::thread([this] {
      NameThisThread("signals");
      Run();
    });
  }
}

namespace {
void Post(int eventfd) {
  const uint64_t one = 1;
  const ssize_t written = ::write(eventfd, &one, sizeof one);
  (void)written;  // an eventfd's counter takes it
}
}  // namespace

void StopSignalWatch::Run() {
  // The second descriptor: Stop's, then (once Stop came with the interrupter running) the
  // interrupter's end, waited for while a second signal still counts.
  pollfd fds[2] = {{.fd = signals_, .events = POLLIN}, {.fd = wake_, .events = POLLIN}};
  for (;;) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents != 0) {
      // Stop, with no signal taken: one that comes with it stays pending. Or the interrupter
      // ended after Stop.
      if (fds[1].fd == done_ || !interrupter_.joinable()) break;
      Post(halt_);
      fds[1].fd = done_;
    }
    if (fds[0].revents != 0) {
      signalfd_siginfo info{};
      if (::read(signals_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        const int signal = static_cast<int>(info.ssi_signo);
        if (taken_ != 0) {
          std::fprintf(stderr, "floatplane: a second %s: stopping at once\n",
                       signal == SIGINT ? "SIGINT" : "SIGTERM");
          DieBySignal(signal);
        }
        taken_ = signal;
        interrupter_ = std::thread([this] { Interrupt(); });
      }
    }
  }
  if (interrupter_.joinable()) {
    Post(halt_);
    interrupter_.join();
  }
}

void StopSignalWatch::Interrupt() {
  pollfd halt{.fd = halt_, .events = POLLIN};
  for (;;) {
    on_signal_();
    const int ready = ::poll(&halt, 1, 50);
    if (ready > 0 || (ready < 0 && errno != EINTR)) break;
  }
  Post(done_);
}

int StopSignalWatch::Stop() {
  if (thread_.joinable()) {
    Post(wake_);
    thread_.join();
  }
  for (int* fd : {&signals_, &wake_, &halt_, &done_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
  return taken_;
}

void DieBySignal(int signal) {
  std::fflush(nullptr);
  ::signal(signal, SIG_DFL);
  sigset_t just;
  sigemptyset(&just);
  sigaddset(&just, signal);
  pthread_sigmask(SIG_UNBLOCK, &just, nullptr);
  ::raise(signal);
  std::_Exit(128 + signal);  // not reached: the default action of SIGINT and SIGTERM ends it
}

void WaitForStopSignal(const sigset_t& stop_signals, const std::function<void()>& on_reload) {
  int sig = 0;
  for (;;) {
    sigwait(&stop_signals, &sig);
    if (sig != SIGHUP) break;
    if (on_reload) on_reload();
  }
  fp::LogEvent("info", "stopping", {{"signal", sig == SIGINT ? "SIGINT" : "SIGTERM"}});
}

void AddLogLevelOption(CLI::App& command, std::string& level, std::string_view what_info_omits) {
  command
      .add_option("--log-level", level,
                  fmt::format("Least severe log lines written to stderr: debug, info, warn or "
                              "error (info leaves out {})",
                              what_info_omits))
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}))
      ->capture_default_str();
}

void ApplyLogLevel(const std::string& level) {
  SetLogLevel(ParseLogLevel(level).value_or(LogLevel::kInfo));
}

}  // namespace fp::cmd
