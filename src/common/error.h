#pragma once

#include <string>
#include <string_view>
#include <tl/expected.hpp>
#include <utility>

namespace fp {

// The kinds of failure a caller reacts to differently. Each maps to exactly one HTTP status
// (see HttpStatus) and one Oxide `error_code`.
enum class ErrorKind {
  kInvalidRequest,        // 400 InvalidRequest
  kInvalidValue,          // 400 InvalidValue (Oxide's for a value out of its allowed range)
  kObjectAlreadyExists,   // 400 ObjectAlreadyExists
  kQuotaExceeded,         // 400 QuotaExceeded (floatplane's: an IP quota would be exceeded)
  kUnauthenticated,       // 401 Unauthenticated
  kForbidden,             // 403 Forbidden
  kNotFound,              // 404 ObjectNotFound
  kUnprocessableEntity,   // 422 UnprocessableEntity
  kTooManyRequests,       // 429 TooManyRequests (with Retry-After)
  kServiceUnavailable,    // 503 ServiceNotAvailable
  kInsufficientCapacity,  // 507 InsufficientCapacity
  kInternal,              // 500 Internal
};

// An error value. `message` is what the client sees (except for kInternal, whose message is
// replaced by a generic one at the API boundary and only logged). `retry_after_seconds` is
// set on kServiceUnavailable errors to become a Retry-After header.
class Error {
 public:
  Error(ErrorKind kind, std::string message) : kind_(kind), message_(std::move(message)) {}

  static Error InvalidRequest(std::string message) {
    return {ErrorKind::kInvalidRequest, std::move(message)};
  }
  // `unsupported value for "<label>": <message>` (Oxide's InvalidValue).
  static Error InvalidValue(std::string_view label, std::string_view message);
  // `already exists: <type> "<name>"`.
  static Error AlreadyExists(std::string_view type, std::string_view name);
  // `not found: <type> with name "<name>"`.
  static Error NotFoundByName(std::string_view type, std::string_view name);
  // `not found: <type> with id "<id>"`.
  static Error NotFoundById(std::string_view type, std::string_view id);
  // `not found: <text>`.
  static Error NotFound(std::string_view text);
  static Error Unauthenticated(std::string message) {
    return {ErrorKind::kUnauthenticated, std::move(message)};
  }
  static Error Forbidden() { return {ErrorKind::kForbidden, "Forbidden"}; }
  static Error Unprocessable(std::string message) {
    return {ErrorKind::kUnprocessableEntity, std::move(message)};
  }
  static Error Unavailable(std::string message, int retry_after_seconds = 1) {
    Error e{ErrorKind::kServiceUnavailable, std::move(message)};
    e.retry_after_seconds_ = retry_after_seconds;
    return e;
  }
  static Error TooManyRequests(std::string message, int retry_after_seconds) {
    Error e{ErrorKind::kTooManyRequests, std::move(message)};
    e.retry_after_seconds_ = retry_after_seconds;
    return e;
  }
  // `Insufficient capacity: <text>`.
  static Error InsufficientCapacity(std::string_view text);
  static Error Internal(std::string detail) { return {ErrorKind::kInternal, std::move(detail)}; }

  ErrorKind kind() const { return kind_; }
  const std::string& message() const { return message_; }
  int retry_after_seconds() const { return retry_after_seconds_; }

  int HttpStatus() const;
  std::string_view ErrorCode() const;

  // Prefixes the message with context ("body.name: "); used while validating input.
  Error WithContext(std::string_view context) const;

 private:
  ErrorKind kind_;
  std::string message_;
  int retry_after_seconds_ = 0;
};

// A value or the error that took its place. [[nodiscard]]: a call whose result is dropped does
// not compile (-Werror), so an error cannot be lost by forgetting it; where dropping it is
// right, the call says so with `(void)` and a comment saying why. A thin class rather than
// tl::expected itself, which carries no such attribute: it is a tl::expected in every other
// way (and converts from one, e.g. what and_then returns).
template <typename T, typename E>
class [[nodiscard]] Expected : public tl::expected<T, E> {
 public:
  using tl::expected<T, E>::expected;
  Expected(const tl::expected<T, E>& e) : tl::expected<T, E>(e) {}
  Expected(tl::expected<T, E>&& e) : tl::expected<T, E>(std::move(e)) {}
};

template <typename T>
using Result = Expected<T, Error>;
using Status = Result<void>;

inline tl::unexpected<Error> Fail(Error e) { return tl::unexpected<Error>(std::move(e)); }

inline Status Ok() { return {}; }

}  // namespace fp

// Propagates an error from an expression yielding Result<T>/Status; otherwise evaluates to the
// value (GNU statement expression, as gcc and clang both support). Nestable.
#define FP_CONCAT_INNER_(a, b) a##b
#define FP_CONCAT_(a, b) FP_CONCAT_INNER_(a, b)
#define FP_TRY(expr) FP_TRY_IMPL_(expr, FP_CONCAT_(fp_try_result_, __COUNTER__))
#define FP_TRY_IMPL_(expr, var)                          \
  __extension__({                                        \
    auto var = (expr);                                   \
    if (!var) return ::fp::Fail(std::move(var).error()); \
    std::move(var).value();                              \
  })

#define FP_CHECK_OK(expr) FP_CHECK_OK_IMPL_(expr, FP_CONCAT_(fp_check_result_, __COUNTER__))
#define FP_CHECK_OK_IMPL_(expr, var)                     \
  do {                                                   \
    auto var = (expr);                                   \
    if (!var) return ::fp::Fail(std::move(var).error()); \
  } while (0)
