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

// A library's table of functions is a struct whose first member is the LoadedLibrary
// `library`, then a pointer per function, each declared by FP_LOADED_FUNCTION from an X-macro
// list of (return type, name, (parameters), (arguments)). LoadedOnce<Table>() makes the table at
// its first call (thread-safe) and never destroys it: a call while the process exits, after
// static destruction, still finds its functions.
#define FP_LOADED_FUNCTION(ret, name, params, args) \
  ret(*name) params = library.Function<ret(*) params>(#name);

template <typename Table>
const Table& LoadedOnce() {
  static const Table* const table = new Table;
  return *table;
}

// Defines the C function `name` (declared by the library's own header, so a signature that
// differs does not compile) forwarding to the one in Table's library; exits with the library's
// error if it could not be loaded (callers ask for that error before the first call).
#define FP_FORWARD_TO_LOADED(Table, ret, name, params, args) \
  ret name params {                                          \
    const auto& lib = ::fp::LoadedOnce<Table>();             \
    lib.library.ExitUnlessLoaded();                          \
    return lib.name args;                                    \
  }

}  // namespace fp
