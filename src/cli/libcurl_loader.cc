// libcurl, loaded when the command-line client first sends a request rather than at every start
// of the binary: only the client uses it, and linking it made every start (servers and agents
// included) load it and the libraries it pulls in (Kerberos, LDAP, SSH, RTMP, ...); with libpq
// loaded the same way (db/postgres/libpq_loader.cc, which has the measurements), a start loads
// 14 shared libraries instead of 48. The functions the client calls are defined here, each
// forwarding to the one of the same name in libcurl.so.4, opened with dlopen on first use; the
// declarations come from curl.h (with its type-checking macros off in this file only, which is
// kept out of the unity batches), so a signature that differs from libcurl's does not compile.
//
// curl_easy_setopt and curl_easy_getinfo take their value as a variadic argument whose type
// curl documents by the option's number: below CURLOPTTYPE_OBJECTPOINT a long, then an object
// pointer, a function pointer (CURLOPTTYPE_FUNCTIONPOINT), a curl_off_t (CURLOPTTYPE_OFF_T) and
// a blob pointer (CURLOPTTYPE_BLOB); getinfo's is always a pointer. They are forwarded with
// that type, as libcurl itself reads them.

#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cli/transport.h"

#define FP_LIBCURL_FUNCTIONS(X)                                                          \
  X(void, curl_easy_cleanup, (CURL * curl), (curl))                                      \
  X(CURL*, curl_easy_init, (void), ())                                                   \
  X(CURLcode, curl_easy_perform, (CURL * curl), (curl))                                  \
  X(void, curl_easy_reset, (CURL * curl), (curl))                                        \
  X(const char*, curl_easy_strerror, (CURLcode code), (code))                            \
  X(void, curl_global_cleanup, (void), ())                                               \
  X(CURLcode, curl_global_init, (long flags), (flags))                                   \
  X(struct curl_slist*, curl_slist_append, (struct curl_slist * list, const char* text), \
    (list, text))                                                                        \
  X(void, curl_slist_free_all, (struct curl_slist * list), (list))

namespace fp::cli {
namespace {

constexpr const char* kLibcurlSoname = "libcurl.so.4";

struct LibcurlFunctions {
#define FP_LIBCURL_POINTER(ret, name, params, args) ret(*name) params = nullptr;
  FP_LIBCURL_FUNCTIONS(FP_LIBCURL_POINTER)
#undef FP_LIBCURL_POINTER
  CURLcode (*curl_easy_setopt)(CURL*, CURLoption, ...) = nullptr;
  CURLcode (*curl_easy_getinfo)(CURL*, CURLINFO, ...) = nullptr;
  std::string error;  // why it could not be loaded; empty once it is
};

template <typename F>
bool Resolve(void* handle, const char* name, F& out, std::string& error) {
  out = reinterpret_cast<F>(dlsym(handle, name));
  if (out == nullptr) error = fmt::format("{} has no function {}", kLibcurlSoname, name);
  return out != nullptr;
}

LibcurlFunctions LoadLibcurlFunctions() {
  LibcurlFunctions lib;
  // Never closed: the handles' memory belongs to it until the process ends.
  void* handle = dlopen(kLibcurlSoname, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    lib.error = fmt::format("cannot load {} (Debian's libcurl4): {}", kLibcurlSoname, dlerror());
    return lib;
  }
#define FP_LIBCURL_RESOLVE(ret, name, params, args) \
  if (!Resolve(handle, #name, lib.name, lib.error)) return lib;
  FP_LIBCURL_FUNCTIONS(FP_LIBCURL_RESOLVE)
#undef FP_LIBCURL_RESOLVE
  if (!Resolve(handle, "curl_easy_setopt", lib.curl_easy_setopt, lib.error)) return lib;
  if (!Resolve(handle, "curl_easy_getinfo", lib.curl_easy_getinfo, lib.error)) return lib;
  return lib;
}

const LibcurlFunctions& LibcurlLoaded() {
  static const LibcurlFunctions lib = LoadLibcurlFunctions();
  return lib;
}

const LibcurlFunctions& LibcurlOrAbort() {
  const LibcurlFunctions& lib = LibcurlLoaded();
  if (!lib.error.empty()) {
    std::fprintf(stderr, "floatplane: %s\n", lib.error.c_str());
    std::abort();
  }
  return lib;
}

}  // namespace

std::string LoadLibcurl() { return LibcurlLoaded().error; }

}  // namespace fp::cli

// CURLoption and CURLINFO, the last named parameters before the values, are enums whose values
// all fit an int: default argument promotion leaves them as they are, so va_start on them is
// defined (clang warns for any enum; curl.h declares them so).
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wvarargs"
#endif

extern "C" {
#define FP_LIBCURL_FORWARD(ret, name, params, args) \
  ret name params { return fp::cli::LibcurlOrAbort().name args; }
FP_LIBCURL_FUNCTIONS(FP_LIBCURL_FORWARD)
#undef FP_LIBCURL_FORWARD

CURLcode curl_easy_setopt(CURL* curl, CURLoption option, ...) {
  const auto& lib = fp::cli::LibcurlOrAbort();
  va_list ap;
  va_start(ap, option);
  CURLcode rc;
  if (option < CURLOPTTYPE_OBJECTPOINT) {
    rc = lib.curl_easy_setopt(curl, option, va_arg(ap, long));
  } else if (option < CURLOPTTYPE_FUNCTIONPOINT) {
    rc = lib.curl_easy_setopt(curl, option, va_arg(ap, void*));
  } else if (option < CURLOPTTYPE_OFF_T) {
    using AnyFunction = void (*)();
    rc = lib.curl_easy_setopt(curl, option, va_arg(ap, AnyFunction));
  } else if (option < CURLOPTTYPE_BLOB) {
    rc = lib.curl_easy_setopt(curl, option, va_arg(ap, curl_off_t));
  } else {
    rc = lib.curl_easy_setopt(curl, option, va_arg(ap, void*));
  }
  va_end(ap);
  return rc;
}

CURLcode curl_easy_getinfo(CURL* curl, CURLINFO info, ...) {
  const auto& lib = fp::cli::LibcurlOrAbort();
  va_list ap;
  va_start(ap, info);
  CURLcode rc = lib.curl_easy_getinfo(curl, info, va_arg(ap, void*));
  va_end(ap);
  return rc;
}
}
