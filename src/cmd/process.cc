#include "cmd/process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "common/log.h"

namespace fp::cmd {

void TuneAllocator() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables && std::string_view(tunables).find("glibc.malloc.") != std::string_view::npos) {
    return;
  }
  mallopt(M_MMAP_THRESHOLD, 16 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
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
