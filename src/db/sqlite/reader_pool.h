#pragma once

// The SQLite engine's read connections.

#include <condition_variable>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/mutex.h"
#include "db/sqlite/connection.h"

namespace fp::db::sqlite {

// Read connections: at most kMaxReaders open (each holds descriptors for the database, its
// log and the shared-memory index); a read finding all of them busy waits for one. A thread
// that already holds one (a read inside a read) is never made to wait, so it cannot deadlock.
// Thread-safe.
class ReaderPool {
 public:
  static constexpr int kMaxReaders = 64;
  // Each one's page cache bound. A read after a write finds its cache stale and drops it, so
  // under writes a reader's cache serves one transaction; idle, dozens of readers (a sled
  // watcher per sled) at SQLite's default 2 MB would hold tens of MiB for little.
  static constexpr int kReaderCacheKib = 512;

  explicit ReaderPool(std::string path) : path_(std::move(path)) {}

  // An idle connection, or a new one while fewer than kMaxReaders are open; otherwise waits
  // for one to come back (unless this thread holds one already). Errors: opening failed.
  Result<std::unique_ptr<SqliteConnection>> Acquire();
  // Returns a connection taken by Acquire, on the thread that took it.
  void Release(std::unique_ptr<SqliteConnection> conn);
  // Read connections open now (idle or in use); at most kMaxReaders but for reads in reads.
  int open_readers() const {
    MutexLock lock(mu_);
    return open_readers_;
  }
  // Reads waiting now for a connection to come back.
  int waiting() const {
    MutexLock lock(mu_);
    return waiting_;
  }

 private:
  std::string path_;
  mutable Mutex mu_;
  std::condition_variable cv_;  // a connection came back
  std::vector<std::unique_ptr<SqliteConnection>> idle_ FP_GUARDED_BY(mu_);
  int open_readers_ FP_GUARDED_BY(mu_) = 0;
  int waiting_ FP_GUARDED_BY(mu_) = 0;
};

}  // namespace fp::db::sqlite
