#pragma once

// What every floatplane process does at start and stop: allocator and descriptor limits, the
// listen address, stop signals, the owner-only secret file.

#include <signal.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <thread>

#include "common/clock.h"
#include "common/error.h"
#include "common/mutex.h"
#include "http/host_port.h"

namespace fp::cmd {

// Every read transaction that follows a write drops its SQLite connection's page cache, so each
// request frees and reallocates a few hundred KiB. glibc's defaults hand such memory back to the
// kernel at once (madvise, a TLB shootdown across cores) and fault it in again: about a tenth of
// the server's CPU under load. Keep up to 64 MiB of free memory per arena instead, and serve
// allocations below 16 MiB from the heap. GLIBC_TUNABLES that set malloc options win.
void TuneAllocator();

// Gives the kernel back the memory the allocator holds free, once that is more than `keep`
// bytes beyond what the last trim left counted as free (the allocator still counts pages it
// handed back, and fragments it cannot), looked at every `period` on a thread of its own until
// destroyed. TuneAllocator keeps
// freed memory for reuse; without this a burst of work (a switch's whole NAT table sent again,
// thousands of creates) would hold its peak for the life of the process, each arena up to 64
// MiB. `free_bytes` and `trim` are the allocator's (glibc's mallinfo2 and malloc_trim) unless
// a test gives its own.
class AllocatorTrimmer {
 public:
  // What every floatplane process runs with: a few requests' worth of free memory is kept.
  static constexpr std::chrono::milliseconds kPeriod{5000};
  static constexpr size_t kKeep = size_t{16} << 20;

  struct Allocator {
    std::function<size_t()> free_bytes;
    std::function<void()> trim;
  };
  static Allocator Glibc();

  explicit AllocatorTrimmer(const Clock& clock, std::chrono::milliseconds period = kPeriod,
                            size_t keep = kKeep, Allocator allocator = Glibc());
  ~AllocatorTrimmer();
  AllocatorTrimmer(const AllocatorTrimmer&) = delete;
  AllocatorTrimmer& operator=(const AllocatorTrimmer&) = delete;

  // Looks once, as the thread does every period (for tests). Returns whether it trimmed.
  bool TrimIfAbove();
  // Trims so far.
  int64_t trims() const;

 private:
  const Clock& clock_;
  const std::chrono::milliseconds period_;
  const size_t keep_;
  const Allocator allocator_;
  mutable Mutex mu_;
  std::condition_variable cv_;
  bool stop_ FP_GUARDED_BY(mu_) = false;
  int64_t trims_ FP_GUARDED_BY(mu_) = 0;
  size_t after_last_trim_ FP_GUARDED_BY(mu_) = 0;  // free bytes counted right after it
  std::thread thread_;
};

// Each client connection (up to --max-connections), agent connection and read connection of
// the datastore holds a descriptor; the usual soft limit of 1024 is below
// what a loaded server needs. Raise it to the hard limit, as servers commonly do.
void RaiseDescriptorLimit();

// Accepts HOST:PORT, with IPv6 hosts in brackets ([::1]:8080).
Result<http::HostPort> ParseListen(const std::string& text);

// Writes `content` to `path` atomically (temporary file, fsync, rename), readable by the owner
// only.
Status WriteSecretFile(const std::filesystem::path& path, const std::string& content);

// An exclusive hold on a file that no other process can take while this one lives, and that the
// kernel gives up when the process ends, however it ends (a SIGKILL included): an flock on
// `path`, created if needed, which holds the holder's pid and command line for the message of
// the next process that tries.
class ExclusiveHold {
 public:
  // Takes the hold on `path`. Unavailable naming the process that holds it (pid and command
  // line as it recorded them), or Internal when the file cannot be opened.
  static Result<ExclusiveHold> Take(const std::filesystem::path& path);
  ExclusiveHold(ExclusiveHold&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  ExclusiveHold& operator=(ExclusiveHold&&) = delete;
  ExclusiveHold(const ExclusiveHold&) = delete;
  ~ExclusiveHold();

 private:
  explicit ExclusiveHold(int fd) : fd_(fd) {}
  int fd_;
};

// Blocks SIGINT and SIGTERM (and SIGHUP with `reload`) in the calling thread and in every
// thread it starts afterwards, so that only WaitForStopSignal (or a StopSignalWatch) sees them;
// ignores SIGPIPE. Call before any thread starts.
sigset_t BlockStopSignals(bool reload = false);

// Waits until SIGINT or SIGTERM arrives, and logs it. A SIGHUP (if blocked) runs `on_reload`
// and the wait goes on.
void WaitForStopSignal(const sigset_t& stop_signals,
                       const std::function<void()>& on_reload = nullptr);

// While the caller does what a stop must cut short rather than wait for (the schema migration
// at start, which can take minutes), a thread of its own takes SIGINT and SIGTERM (blocked by
// BlockStopSignals) in WaitForStopSignal's stead: at the signal, and every 50 ms after it until
// Stop (a cancel may miss a statement that had not begun), `on_signal` runs, on a thread of its
// own. A second signal ends the process at once (DieBySignal), for when the first cannot take
// effect, even while `on_signal` blocks (a cancel request waits for a database host that is
// gone). Without its descriptors (a signalfd and three eventfds: descriptors exhausted) it
// watches nothing: the signals stay pending for WaitForStopSignal, as before a watch.
class StopSignalWatch {
 public:
  explicit StopSignalWatch(std::function<void()> on_signal);
  ~StopSignalWatch() { Stop(); }
  StopSignalWatch(const StopSignalWatch&) = delete;
  StopSignalWatch& operator=(const StopSignalWatch&) = delete;
  // Ends the watch, after an `on_signal` under way (a second signal meanwhile still ends the
  // process): the signal it took (SIGINT or SIGTERM), or 0. A signal that comes as it ends
  // stays pending.
  int Stop();

 private:
  void Run();
  // The interrupter's thread: `on_signal_` now and every 50 ms until halted.
  void Interrupt();
  std::function<void()> on_signal_;
  int signals_ = -1;  // signalfd
  int wake_ = -1;     // eventfd: Stop
  int halt_ = -1;     // eventfd: the interrupter is to end
  int done_ = -1;     // eventfd: the interrupter ended
  int taken_ = 0;     // written by the thread, read after it ended
  std::thread thread_;
  std::thread interrupter_;  // started and joined by thread_
};

// Ends the process by `signal` (SIGINT, SIGTERM) with its default action, as if it had never
// been blocked: a shell shows 128 + signal, and a supervisor sees a stop by that signal.
[[noreturn]] void DieBySignal(int signal);

// Adds `--log-level debug|info|warn|error` (default: `level`'s value) to `command`;
// `what_info_omits` says what the default level leaves out. Apply it with ApplyLogLevel once
// parsed.
void AddLogLevelOption(CLI::App& command, std::string& level, std::string_view what_info_omits);
void ApplyLogLevel(const std::string& level);

}  // namespace fp::cmd
