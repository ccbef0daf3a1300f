#pragma once

// A shared library opened with dlopen when the process first needs it instead of linked, so
// that a start of the binary that does not use it does not map and relocate it and the
// libraries it pulls in (db/postgres/libpq_loader.cc and cli/libcurl_loader.cc: libpq and
// libcurl, which only a server on PostgreSQL and the command-line client use).

#include <string>

namespace fp {

class LoadedLibrary {
 public:
  // Opens `soname` (never closed: what it allocated stays valid until the process ends).
  // `what` names it in an error, with the Debian package that installs it.
  LoadedLibrary(const char* soname, const char* what);

  // The function `name`, or nullptr after an error (recorded: the first one is kept).
  template <typename F>
  F Function(const char* name) {
    return reinterpret_cast<F>(Symbol(name));
  }

  // Why the library or one of its functions could not be loaded; "" if all were.
  const std::string& error() const { return error_; }
  // Exits the process with the error on stderr, if there is one: for a forwarding function
  // called without its library, which callers avoid by asking error() first.
  void ExitUnlessLoaded() const;

 private:
  void* Symbol(const char* name);

  const char* soname_;
  void* handle_ = nullptr;
  std::string error_;
};

}  // namespace fp
