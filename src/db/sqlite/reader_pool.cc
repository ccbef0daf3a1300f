#include "db/sqlite/reader_pool.h"

namespace fp::db::sqlite {

namespace {
thread_local int readers_held = 0;  // read connections this thread holds (any pool)
}  // namespace

Result<std::unique_ptr<SqliteConnection>> ReaderPool::Acquire() {
  {
    MutexLock lock(mu_);
    if (readers_held == 0) {
      ++waiting_;  // seen only while it waits: the lock is held until then
      lock.Wait(cv_,
                [&]() FP_REQUIRES(mu_) { return !idle_.empty() || open_readers_ < kMaxReaders; });
      --waiting_;
    }
    if (!idle_.empty()) {
      auto conn = std::move(idle_.back());
      idle_.pop_back();
      ++readers_held;
      return conn;
    }
    ++open_readers_;
  }
  auto opened = SqliteConnection::Open(path_, kReaderCacheKib);
  if (!opened) {
    {
      MutexLock lock(mu_);
      --open_readers_;
    }
    cv_.notify_one();
    return opened;
  }
  ++readers_held;
  return opened;
}

void ReaderPool::Release(std::unique_ptr<SqliteConnection> conn) {
  --readers_held;
  {
    MutexLock lock(mu_);
    idle_.push_back(std::move(conn));
  }
  cv_.notify_one();
}

}  // namespace fp::db::sqlite
