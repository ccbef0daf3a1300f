#include "db/sqlite/log_vfs.h"

#include <sqlite3.h>

#include <atomic>
#include <cstring>
#include <mutex>

namespace fp::db::sqlite {

namespace {

// The longest write held: a frame's header (24 bytes). The log's own header (32, at offset 0)
// continues no write and is never held.
constexpr int kHeld = 64;

std::atomic<int64_t> asked_writes{0};
std::atomic<int64_t> made_writes{0};
std::atomic<int64_t> held_sent_alone{0};

// An open file of this VFS: the wrapped VFS's file lives in the memory right after it.
struct alignas(8) LogFile {
  sqlite3_file base;  // base.pMethods: ours, or null if the wrapped open left none
  sqlite3_file* real;
  bool log;  // a write-ahead log: writes may be held
  // Where the last call on the file, if it was a write, ended (-1 otherwise): only a write that
  // continues one is held (see Write).
  sqlite3_int64 write_end;
  int held_len;
  sqlite3_int64 held_at;
  unsigned char held[kHeld];
  unsigned char* joined;  // a held write and the next one, in one buffer (sqlite3_malloc)
  int joined_cap;
};

LogFile* Of(sqlite3_file* file) { return reinterpret_cast<LogFile*>(file); }
sqlite3_file* Real(sqlite3_file* file) { return Of(file)->real; }
sqlite3_vfs* Base(sqlite3_vfs* vfs) { return static_cast<sqlite3_vfs*>(vfs->pAppData); }

int Made(LogFile* f, const void* data, int amt, sqlite3_int64 at) {
  made_writes.fetch_add(1, std::memory_order_relaxed);
  return f->real->pMethods->xWrite(f->real, data, amt, at);
}

// Writes what is held, before any other call on the file than a write.
int Flushed(sqlite3_file* file) {
  LogFile* f = Of(file);
  f->write_end = -1;
  if (f->held_len == 0) return SQLITE_OK;
  held_sent_alone.fetch_add(1, std::memory_order_relaxed);
  int len = f->held_len;
  f->held_len = 0;
  return Made(f, f->held, len, f->held_at);
}

// Holds a short write (a frame's header) only when it continues the write before it, with no
// other call on the file in between: SQLite's frames come so, header then page, and a held header
// is joined with its page. A header written alone (SQLite rewriting checksums after a large
// transaction's spilled pages changed again reads each frame, then writes its header) follows a
// read and goes at once; held, the last one would have outlived the commit, with no later call
// on this file to flush it before the engine's sync (on a descriptor of its own) acknowledged
// the commit, and before a checkpoint copied the commit's pages into the database.
int Write(sqlite3_file* file, const void* data, int amt, sqlite3_int64 at) {
  LogFile* f = Of(file);
  if (!f->log) return f->real->pMethods->xWrite(f->real, data, amt, at);
  asked_writes.fetch_add(1, std::memory_order_relaxed);
  const bool continues = at == f->write_end;
  f->write_end = at + amt;
  if (f->held_len > 0 && at == f->held_at + f->held_len) {
    const int len = f->held_len + amt;
    if (len <= kHeld) {
      std::memcpy(f->held + f->held_len, data, static_cast<size_t>(amt));
      f->held_len = len;
      return SQLITE_OK;
    }
    if (len > f->joined_cap) {
      auto* grown = static_cast<unsigned char*>(sqlite3_realloc(f->joined, len));
      if (grown != nullptr) {
        f->joined = grown;
        f->joined_cap = len;
      }
    }
    if (len <= f->joined_cap) {
      std::memcpy(f->joined, f->held, static_cast<size_t>(f->held_len));
      std::memcpy(f->joined + f->held_len, data, static_cast<size_t>(amt));
      const sqlite3_int64 start = f->held_at;
      f->held_len = 0;
      return Made(f, f->joined, len, start);
    }
    // No memory for the joined write: the two go as SQLite asked.
  }
  if (f->held_len > 0) {
    // Not joined (not contiguous, which SQLite never writes, or no memory): what is held goes
    // first, as SQLite asked.
    held_sent_alone.fetch_add(1, std::memory_order_relaxed);
    const int held = f->held_len;
    f->held_len = 0;
    if (int rc = Made(f, f->held, held, f->held_at); rc != SQLITE_OK) return rc;
  }
  if (continues && amt <= kHeld) {
    std::memcpy(f->held, data, static_cast<size_t>(amt));
    f->held_len = amt;
    f->held_at = at;
    return SQLITE_OK;
  }
  return Made(f, data, amt, at);
}

int Close(sqlite3_file* file) {
  LogFile* f = Of(file);
  int flushed = Flushed(file);
  int closed = f->real->pMethods->xClose(f->real);
  sqlite3_free(f->joined);
  f->joined = nullptr;
  f->joined_cap = 0;
  return flushed != SQLITE_OK ? flushed : closed;
}

// Every other method of the wrapped file, `kMethod`, called after what is held is written:
// Flushing<&sqlite3_io_methods::xRead>::Call reads, and so on.
template <auto kMethod>
struct Flushing;
template <typename... Args, int (*sqlite3_io_methods::*kMethod)(sqlite3_file*, Args...)>
struct Flushing<kMethod> {
  static int Call(sqlite3_file* file, Args... args) {
    if (int rc = Flushed(file); rc != SQLITE_OK) return rc;
    return (Real(file)->pMethods->*kMethod)(Real(file), args...);
  }
};

// These neither read nor change the file's bytes: nothing to flush first.
int SectorSize(sqlite3_file* file) { return Real(file)->pMethods->xSectorSize(Real(file)); }
int DeviceCharacteristics(sqlite3_file* file) {
  return Real(file)->pMethods->xDeviceCharacteristics(Real(file));
}
void ShmBarrier(sqlite3_file* file) { Real(file)->pMethods->xShmBarrier(Real(file)); }
int Unfetch(sqlite3_file* file, sqlite3_int64 at, void* p) {
  return Real(file)->pMethods->xUnfetch(Real(file), at, p);
}

// The same methods at version 3 (shared memory, memory-mapped reads: the unix VFS's) and at
// version 1, for a wrapped file that has only those.
constexpr sqlite3_io_methods kMethods3 = {3,
                                          Close,
                                          Flushing<&sqlite3_io_methods::xRead>::Call,
                                          Write,
                                          Flushing<&sqlite3_io_methods::xTruncate>::Call,
                                          Flushing<&sqlite3_io_methods::xSync>::Call,
                                          Flushing<&sqlite3_io_methods::xFileSize>::Call,
                                          Flushing<&sqlite3_io_methods::xLock>::Call,
                                          Flushing<&sqlite3_io_methods::xUnlock>::Call,
                                          Flushing<&sqlite3_io_methods::xCheckReservedLock>::Call,
                                          Flushing<&sqlite3_io_methods::xFileControl>::Call,
                                          SectorSize,
                                          DeviceCharacteristics,
                                          Flushing<&sqlite3_io_methods::xShmMap>::Call,
                                          Flushing<&sqlite3_io_methods::xShmLock>::Call,
                                          ShmBarrier,
                                          Flushing<&sqlite3_io_methods::xShmUnmap>::Call,
                                          Flushing<&sqlite3_io_methods::xFetch>::Call,
                                          Unfetch};
constexpr sqlite3_io_methods Version1(sqlite3_io_methods methods) {
  methods.iVersion = 1;
  methods.xShmMap = nullptr;
  methods.xShmLock = nullptr;
  methods.xShmBarrier = nullptr;
  methods.xShmUnmap = nullptr;
  methods.xFetch = nullptr;
  methods.xUnfetch = nullptr;
  return methods;
}
constexpr sqlite3_io_methods kMethods1 = Version1(kMethods3);

int Open(sqlite3_vfs* vfs, sqlite3_filename name, sqlite3_file* file, int flags, int* out_flags) {
  LogFile* f = Of(file);
  std::memset(f, 0, sizeof(LogFile));
  f->real = reinterpret_cast<sqlite3_file*>(f + 1);
  int rc = Base(vfs)->xOpen(Base(vfs), name, f->real, flags, out_flags);
  // SQLite closes a file whose open set methods, even a failed one: ours then close the real.
  if (f->real->pMethods == nullptr) return rc;
  f->log = (flags & SQLITE_OPEN_WAL) != 0;
  f->write_end = -1;
  f->base.pMethods = f->real->pMethods->iVersion >= 3 ? &kMethods3 : &kMethods1;
  return rc;
}

int Delete(sqlite3_vfs* vfs, const char* name, int sync_dir) {
  return Base(vfs)->xDelete(Base(vfs), name, sync_dir);
}
int Access(sqlite3_vfs* vfs, const char* name, int flags, int* out) {
  return Base(vfs)->xAccess(Base(vfs), name, flags, out);
}
int FullPathname(sqlite3_vfs* vfs, const char* name, int n, char* out) {
  return Base(vfs)->xFullPathname(Base(vfs), name, n, out);
}
void* DlOpen(sqlite3_vfs* vfs, const char* name) { return Base(vfs)->xDlOpen(Base(vfs), name); }
void DlError(sqlite3_vfs* vfs, int n, char* out) { Base(vfs)->xDlError(Base(vfs), n, out); }
using Symbol = void (*)();
Symbol DlSym(sqlite3_vfs* vfs, void* handle, const char* symbol) {
  return Base(vfs)->xDlSym(Base(vfs), handle, symbol);
}
void DlClose(sqlite3_vfs* vfs, void* handle) { Base(vfs)->xDlClose(Base(vfs), handle); }
int Randomness(sqlite3_vfs* vfs, int n, char* out) {
  return Base(vfs)->xRandomness(Base(vfs), n, out);
}
int Sleep(sqlite3_vfs* vfs, int micros) { return Base(vfs)->xSleep(Base(vfs), micros); }
int CurrentTime(sqlite3_vfs* vfs, double* out) { return Base(vfs)->xCurrentTime(Base(vfs), out); }
int GetLastError(sqlite3_vfs* vfs, int n, char* out) {
  return Base(vfs)->xGetLastError(Base(vfs), n, out);
}
int CurrentTimeInt64(sqlite3_vfs* vfs, sqlite3_int64* out) {
  return Base(vfs)->xCurrentTimeInt64(Base(vfs), out);
}
int SetSystemCall(sqlite3_vfs* vfs, const char* name, sqlite3_syscall_ptr call) {
  return Base(vfs)->xSetSystemCall(Base(vfs), name, call);
}
sqlite3_syscall_ptr GetSystemCall(sqlite3_vfs* vfs, const char* name) {
  return Base(vfs)->xGetSystemCall(Base(vfs), name);
}
const char* NextSystemCall(sqlite3_vfs* vfs, const char* name) {
  return Base(vfs)->xNextSystemCall(Base(vfs), name);
}

}  // namespace

const char* LogVfsName() {
  static constexpr const char* kName = "floatplane-excl";
  static std::once_flag registered;
  std::call_once(registered, [] {
    static sqlite3_vfs vfs;
    sqlite3_vfs* base = sqlite3_vfs_find("unix-excl");
    if (base == nullptr) return;  // opening by this name then fails, saying so
    vfs.iVersion = base->iVersion < 3 ? base->iVersion : 3;
    vfs.szOsFile = static_cast<int>(sizeof(LogFile)) + base->szOsFile;
    vfs.mxPathname = base->mxPathname;
    vfs.zName = kName;
    vfs.pAppData = base;
    vfs.xOpen = Open;
    vfs.xDelete = Delete;
    vfs.xAccess = Access;
    vfs.xFullPathname = FullPathname;
    vfs.xDlOpen = DlOpen;
    vfs.xDlError = DlError;
    vfs.xDlSym = DlSym;
    vfs.xDlClose = DlClose;
    vfs.xRandomness = Randomness;
    vfs.xSleep = Sleep;
    vfs.xCurrentTime = CurrentTime;
    vfs.xGetLastError = GetLastError;
    vfs.xCurrentTimeInt64 = CurrentTimeInt64;
    vfs.xSetSystemCall = SetSystemCall;
    vfs.xGetSystemCall = GetSystemCall;
    vfs.xNextSystemCall = NextSystemCall;
    (void)sqlite3_vfs_register(&vfs, 0);
  });
  return kName;
}

LogVfsWrites LogVfsWriteCounts() {
  return LogVfsWrites{asked_writes.load(std::memory_order_relaxed),
                      made_writes.load(std::memory_order_relaxed),
                      held_sent_alone.load(std::memory_order_relaxed)};
}

}  // namespace fp::db::sqlite
