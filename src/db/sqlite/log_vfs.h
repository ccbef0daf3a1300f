#pragma once

// The SQLite VFS the datastore opens its database with: "unix-excl" (see
// SqliteConnection::Open), except that a frame of the write-ahead log reaches the file in one
// write instead of two. SQLite writes each frame as its 24-byte header, then its page, at the
// offset right after; each write is a system call, and a commit writes some fourteen frames.
// The header is held until the page's write, which then carries both. Held bytes never outlive
// the next call on the same file (a read, a sync, a size, a lock, anything), so the file is,
// for every caller, what SQLite wrote; and SQLite publishes a frame to readers only after its
// page is written.

#include <cstdint>

namespace fp::db::sqlite {

// The VFS's name, registered (not as the default) at the first call.
const char* LogVfsName();

// Counted since the process started, for tests and measurements: writes SQLite asked of the
// write-ahead logs, and writes that reached them.
struct LogVfsWrites {
  int64_t asked = 0;
  int64_t made = 0;
};
LogVfsWrites LogVfsWriteCounts();

}  // namespace fp::db::sqlite
