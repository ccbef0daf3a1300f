// The worker pool: threads started as complete requests need them (up to max_workers), each
// running one connection's handler at a time, ending when idle.

#include <fmt/format.h>
#include <sys/socket.h>
#include <unistd.h>

#include <system_error>

#include "common/log.h"
#include "common/thread_name.h"
#include "http/event_server.h"

namespace fp::http::detail {

void EventServer::Dispatch(std::unique_ptr<Conn> conn) {
  MutexLock lock(mu_);
  if (queue_.size() >= 4 * static_cast<size_t>(options_.max_workers)) {
    lock.Unlock();
    ++refused_busy_;
    std::string wire =
        ErrorWire(random_, 503, "ServiceUnavailable",
                  "the server is handling as many requests as it can; retry shortly");
    SendNow(*conn, wire);
    Close(*conn);
    return;
  }
  conn->queued_at = clock_.Monotonic();
  queue_.push_back(std::move(conn));
  // Joined first, so that workers which ended idle do not count against max_workers.
  ReapWorkersLocked();
  if (static_cast<size_t>(idle_workers_) >= queue_.size() ||
      static_cast<int>(workers_.size()) >= options_.max_workers) {
    work_cv_.notify_one();
    return;
  }
  uint64_t wid = next_worker_id_++;
  try {
    workers_[wid] = std::thread([this, wid] { WorkerMain(wid); });
  } catch (const std::system_error& e) {
    // The request waits for a running worker; with none running, nothing would serve it.
    workers_.erase(wid);
    LogEvent("warn", "cannot start a worker thread", {{"error", e.what()}});
    work_cv_.notify_one();
  }
}

void EventServer::ReapWorkersLocked() {
  for (uint64_t wid : finished_workers_) {
    auto it = workers_.find(wid);
    if (it == workers_.end()) continue;
    it->second.join();  // it has returned already, or is about to
    workers_.erase(it);
  }
  finished_workers_.clear();
}

void EventServer::WorkerMain(uint64_t wid) {
  NameThisThread(options_.thread_name + "-worker");
  MutexLock lock(mu_);
  for (;;) {
    ++idle_workers_;
    bool woken = clock_.WaitFor(lock, work_cv_, options_.worker_idle_exit, [&]() FP_REQUIRES(mu_) {
      return !queue_.empty() || workers_exit_;
    });
    --idle_workers_;
    if (!queue_.empty()) {
      std::unique_ptr<Conn> conn = std::move(queue_.front());
      queue_.pop_front();
      busy_fds_.insert(conn->fd);
      lock.Unlock();
      if (clock_.Monotonic() - conn->queued_at > options_.request_timeout) {
        // Its client has likely given up; running the handler now would only add load.
        ++refused_busy_;
        std::string wire =
            ErrorWire(random_, 503, "ServiceUnavailable",
                      fmt::format("the request waited over {} ms for the server; retry shortly",
                                  options_.request_timeout.count()));
        SendNow(*conn, wire);
        Release(std::move(conn), false);
      } else {
        Serve(std::move(conn));
      }
      lock.Lock();
      idle_cv_.notify_all();
      continue;
    }
    if (workers_exit_) return;
    if (!woken && static_cast<int>(workers_.size()) - static_cast<int>(finished_workers_.size()) >
                      kMinWorkers) {
      finished_workers_.push_back(wid);
      return;
    }
  }
}

void EventServer::Serve(std::unique_ptr<Conn> conn) {
  for (;;) {
    bool keep_alive = Answer(*conn);
    if (!keep_alive || stopping_) break;
    conn->NextRequest(options_, clock_.Monotonic());
    // While other requests wait for a worker, take only what has already arrived.
    bool others_wait;
    {
      MutexLock lock(mu_);
      others_wait = !queue_.empty();
    }
    TimePoint deadline = clock_.Monotonic() + (others_wait ? TimePoint::duration::zero()
                                                           : TimePoint::duration(options_.linger));
    ReadOutcome got = socket_io::ReadMessage(clock_, conn->stream(), conn->buffer, *conn->parser,
                                             deadline, conn->parse_error);
    if (got == ReadOutcome::kMessage || got == ReadOutcome::kMalformed) continue;
    if (got == ReadOutcome::kClosed) break;
    // Nothing complete yet: the loop waits for the rest without holding this thread.
    if (conn->HasPartialRequest()) conn->request_began = clock_.Monotonic();
    Release(std::move(conn), true);
    return;
  }
  Release(std::move(conn), false);
}

void EventServer::Release(std::unique_ptr<Conn> conn, bool keep) {
  MutexLock lock(mu_);
  if (auto it = busy_fds_.find(conn->fd); it != busy_fds_.end()) busy_fds_.erase(it);
  if (!keep || loop_done_) {
    CloseLocked(*conn);
    return;
  }
  returned_.push_back(std::move(conn));
  lock.Unlock();
  Wake();
}

void EventServer::Close(Conn& c) {
  MutexLock lock(mu_);
  CloseLocked(c);
}

void EventServer::CloseLocked(Conn& c) {
  if (c.fd < 0) return;
  socket_io::EndTls(c.tls);
  ::shutdown(c.fd, SHUT_WR);
  ::close(c.fd);
  c.fd = -1;
  --open_;
  auto it = per_client_.find(c.client);
  if (it != per_client_.end() && --it->second <= 0) per_client_.erase(it);
}

}  // namespace fp::http::detail
