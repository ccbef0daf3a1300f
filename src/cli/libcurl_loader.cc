// libcurl, loaded when the command-line client first sends a request rather than at every start
// of the binary: only the client uses it, and linking it made every start (servers and agents
// included) load it and the libraries it pulls in (Kerberos, LDAP, SSH, RTMP, ...); with libpq
// and the netfilter libraries loaded the same way (db/postgres/libpq_loader.cc has the
// measurements), a start maps 13 shared libraries instead of 49 (as ldd counts them, the loader
// included). The functions the client calls are defined here, each
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

#include <cstdarg>
#include <string>

#include "cli/transport.h"
#include "common/loaded_library.h"

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

struct LibcurlFunctions {
  LoadedLibrary library{"libcurl.so.4", "Debian's libcurl4"};
  FP_LIBCURL_FUNCTIONS(FP_LOADED_FUNCTION)
  using SetOpt = CURLcode (*)(CURL*, CURLoption, ...);
  using GetInfo = CURLcode (*)(CURL*, CURLINFO, ...);
  SetOpt curl_easy_setopt = library.Function<SetOpt>("curl_easy_setopt");
  GetInfo curl_easy_getinfo = library.Function<GetInfo>("curl_easy_getinfo");
};

const LibcurlFunctions& LibcurlOrExit() {
  const LibcurlFunctions& lib = LoadedOnce<LibcurlFunctions>();
  lib.library.ExitUnlessLoaded();
  return lib;
}

}  // namespace

std::string LoadLibcurl() { return LoadedOnce<LibcurlFunctions>().library.error(); }

}  // namespace fp::cli

// CURLoption and CURLINFO, the last named parameters before the values, are enums whose values
// all fit an int: default argument promotion leaves them as they are, so va_start on them is
// defined (clang warns for any enum; curl.h declares them so).
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wvarargs"
#endif

#define FP_LIBCURL_FORWARD(ret, name, params, args) \
  FP_FORWARD_TO_LOADED(fp::cli::LibcurlFunctions, ret, name, params, args)
extern "C" {
FP_LIBCURL_FUNCTIONS(FP_LIBCURL_FORWARD)
#undef FP_LIBCURL_FORWARD

CURLcode curl_easy_setopt(CURL* curl, CURLoption option, ...) {
  const auto& lib = fp::cli::LibcurlOrExit();
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
  const auto& lib = fp::cli::LibcurlOrExit();
  va_list ap;
  va_start(ap, info);
  CURLcode rc = lib.curl_easy_getinfo(curl, info, va_arg(ap, void*));
  va_end(ap);
  return rc;
}
}
