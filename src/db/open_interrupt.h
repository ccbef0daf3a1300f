#pragma once

// Stopping a datastore's open from another thread: the schema migration of a start can run for
// minutes (a table copied whole), and an operator's Ctrl-C must end it then, not after it.

#include <atomic>
#include <functional>
#include <utility>

#include "common/mutex.h"

namespace fp::db {

// Given to Datastore::OpenSqlite or OpenPostgres. Interrupt() (from any thread: a signal's
// watcher) marks the open interrupted and cancels the statement the migrating connection runs;
// the migration stops at its next step as well, rolls back what it has not committed, and the
// open fails Unavailable ("interrupted while migrating the schema..."), honoured() then true.
// A statement that begins after a cancel may still run: call Interrupt() again until the open
// returns. Opening the connection itself is not cut short.
class OpenInterrupt {
 public:
  void Interrupt() FP_EXCLUDES(mu_) {
    interrupted_.store(true);
    std::function<void()> standalone;
    {
      MutexLock lock(mu_);
      if (!cancel_) return;
      if (!standalone_) {
        cancel_();
        return;
      }
      standalone = cancel_;
    }
    // Outside the lock: such a cancel may take long (PQcancel connects to the server, and a
    // host that is gone makes it wait for TCP), and the opener's Armed must not wait for it.
    standalone();
  }
  bool interrupted() const { return interrupted_.load(); }
  // The open failed because of the interrupt (not an error of its own that came meanwhile).
  bool honoured() const { return honoured_.load(); }
  // The migration: it stopped for the interrupt.
  void Honour() { honoured_.store(true); }

  // What a cancel needs: the connection itself (it must not outlive it: sqlite3_interrupt), or
  // only what it holds (PostgreSQL's cancel object, which stays valid after the connection).
  enum class Needs { kConnection, kItself };

  // The opener, while a connection runs what Interrupt() must cut short: `cancel` stops the
  // statement running on it (safe from another thread while the connection lives). Disarmed
  // when this ends, after any cancel of kConnection under way: the connection may then go.
  class Armed {
   public:
    Armed(OpenInterrupt* interrupt, std::function<void()> cancel, Needs needs)
        : interrupt_(interrupt) {
      if (interrupt_ == nullptr) return;
      MutexLock lock(interrupt_->mu_);
      interrupt_->cancel_ = std::move(cancel);
      interrupt_->standalone_ = needs == Needs::kItself;
    }
    ~Armed() {
      if (interrupt_ == nullptr) return;
      MutexLock lock(interrupt_->mu_);
      interrupt_->cancel_ = nullptr;
    }
    Armed(const Armed&) = delete;
    Armed& operator=(const Armed&) = delete;

   private:
    OpenInterrupt* interrupt_;
  };

 private:
  std::atomic<bool> interrupted_{false};
  std::atomic<bool> honoured_{false};
  Mutex mu_;
  std::function<void()> cancel_ FP_GUARDED_BY(mu_);
  bool standalone_ FP_GUARDED_BY(mu_) = false;
};

}  // namespace fp::db
