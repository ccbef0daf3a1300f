#pragma once

// The SQLite VFS the datastore opens its database with: "unix-excl" (see
// SqliteConnection::Open), except that a frame of the write-ahead log reaches the file in one
// write instead of two. SQLite writes each frame as its 24-byte header, then its page, at the
// offset right after; each write is a system call, and a commit writes some fourteen frames.
// The header is held until the page's write, which then carries both; only a header that
// continues the write before it is held (a frame's comes right after the previous frame's page),
// so a header SQLite rewrites alone, after reading its frame, goes at once. Held bytes never
// outlive the next call on the same file (a read, a sync, a size, a lock, anything), so the file
// is, for every caller, what SQLite wrote; and nothing is held when a commit returns, nor when
// SQLite publishes a frame to readers and checkpoints (after its page is written).

#include <cstdint>

namespace fp::db::sqlite {

// The VFS's name, registered (not as the default) at the first call.
const char* LogVfsName();

// Counted since the process started, for tests and measurements: writes SQLite asked of the
// write-ahead logs, writes that reached them, and held writes that went out alone, not joined
// with the write they continue (another call on the file came first, a write elsewhere, or no
// memory). SQLite's order makes that none, except where it pads the log to a sector boundary
// before a sync (synchronous = FULL on a device without powersafe overwrite; not the datastore's
// settings), where the sync sends a held header out alone, correctly, before syncing.
struct LogVfsWrites {
  int64_t asked = 0;
  int64_t made = 0;
  int64_t held_sent_alone = 0;
};
LogVfsWrites LogVfsWriteCounts();

}  // namespace fp::db::sqlite
