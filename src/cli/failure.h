#pragma once

// How the command-line client ends: its exit codes, and the one line it prints on stderr when
// it fails (../shared/spec/cli-and-console.md CLI-23, CLI-24).

#include <string>
#include <tl/expected.hpp>
#include <utility>

#include "common/error.h"  // FP_TRY, FP_CHECK_OK

namespace fp::cli {

enum class Exit {
  kOk = 0,
  kApiError = 1,       // the server answered with an error
  kUsage = 2,          // a usage or validation error, found before any request
  kCredentials = 3,    // no usable credentials or configuration
  kUnreachable = 4,    // the server could not be reached, or did not answer in time
  kWaitTimeout = 5,    // a --wait deadline passed
  kInterrupted = 130,  // SIGINT
};

// The exit codes as `floatplane --help` lists them.
inline constexpr const char* kExitCodesHelp =
    "Exit codes: 0 ok, 1 the server returned an error, 2 usage or validation error, 3 no "
    "usable credentials or config, 4 server unreachable or request timed out, 5 --wait "
    "deadline passed, 130 interrupted.";

// Why a command failed: printed as `error: <message>`, then the process exits with `exit`.
struct Failure {
  Exit exit = Exit::kApiError;
  std::string message;
  int http_status = 0;  // the server's status, for an error it answered
};

// A value or the Failure that ends the command; [[nodiscard]] as fp::Result is.
template <typename T>
using CliResult = Expected<T, Failure>;
using CliStatus = CliResult<void>;

inline Failure UsageError(std::string message) { return {Exit::kUsage, std::move(message)}; }
inline Failure CredentialsError(std::string message) {
  return {Exit::kCredentials, std::move(message)};
}

}  // namespace fp::cli

namespace fp {
// For FP_TRY and FP_CHECK_OK in the client's code.
inline tl::unexpected<cli::Failure> Fail(cli::Failure f) {
  return tl::unexpected<cli::Failure>(std::move(f));
}
}  // namespace fp
