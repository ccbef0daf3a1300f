#include "common/loaded_library.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

namespace fp {

LoadedLibrary::LoadedLibrary(const char* soname, const char* what) : soname_(soname) {
  handle_ = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) error_ = fmt::format("cannot load {} ({}): {}", soname, what, dlerror());
}

void* LoadedLibrary::Symbol(const char* name) {
  if (handle_ == nullptr) return nullptr;
  void* symbol = dlsym(handle_, name);
  if (symbol == nullptr && error_.empty()) {
    error_ =
        fmt::format("{} has no function {}: an older version than this build's", soname_, name);
  }
  return symbol;
}

void LoadedLibrary::ExitUnlessLoaded() const {
  if (error_.empty()) return;
  std::fprintf(stderr, "floatplane: %s\n", error_.c_str());
  std::abort();
}

}  // namespace fp
