#include "common/error.h"

#include <fmt/format.h>

namespace fp {

Error Error::InvalidValue(std::string_view label, std::string_view message) {
  return {ErrorKind::kInvalidValue,
          fmt::format("unsupported value for \"{}\": {}", label, message)};
}

Error Error::AlreadyExists(std::string_view type, std::string_view name) {
  return {ErrorKind::kObjectAlreadyExists, fmt::format("already exists: {} \"{}\"", type, name)};
}

Error Error::NotFoundByName(std::string_view type, std::string_view name) {
  return {ErrorKind::kNotFound, fmt::format("not found: {} with name \"{}\"", type, name)};
}

Error Error::NotFoundById(std::string_view type, std::string_view id) {
  return {ErrorKind::kNotFound, fmt::format("not found: {} with id \"{}\"", type, id)};
}

Error Error::NotFound(std::string_view text) {
  return {ErrorKind::kNotFound, fmt::format("not found: {}", text)};
}

Error Error::InsufficientCapacity(std::string_view text) {
  return {ErrorKind::kInsufficientCapacity, fmt::format("Insufficient capacity: {}", text)};
}

int Error::HttpStatus() const {
  switch (kind_) {
    case ErrorKind::kInvalidRequest:
    case ErrorKind::kInvalidValue:
    case ErrorKind::kObjectAlreadyExists:
    case ErrorKind::kQuotaExceeded:
      return 400;
    case ErrorKind::kUnauthenticated:
      return 401;
    case ErrorKind::kForbidden:
      return 403;
    case ErrorKind::kNotFound:
      return 404;
    case ErrorKind::kUnprocessableEntity:
      return 422;
    case ErrorKind::kTooManyRequests:
      return 429;
    case ErrorKind::kServiceUnavailable:
      return 503;
    case ErrorKind::kInsufficientCapacity:
      return 507;
    case ErrorKind::kInternal:
      return 500;
  }
  return 500;
}

std::string_view Error::ErrorCode() const {
  switch (kind_) {
    case ErrorKind::kInvalidRequest:
      return "InvalidRequest";
    case ErrorKind::kInvalidValue:
      return "InvalidValue";
    case ErrorKind::kObjectAlreadyExists:
      return "ObjectAlreadyExists";
    case ErrorKind::kQuotaExceeded:
      return "QuotaExceeded";
    case ErrorKind::kUnauthenticated:
      return "Unauthenticated";
    case ErrorKind::kForbidden:
      return "Forbidden";
    case ErrorKind::kNotFound:
      return "ObjectNotFound";
    case ErrorKind::kUnprocessableEntity:
      return "UnprocessableEntity";
    case ErrorKind::kTooManyRequests:
      return "TooManyRequests";
    case ErrorKind::kServiceUnavailable:
      return "ServiceNotAvailable";
    case ErrorKind::kInsufficientCapacity:
      return "InsufficientCapacity";
    case ErrorKind::kInternal:
      return "Internal";
  }
  return "Internal";
}

Error Error::WithContext(std::string_view context) const {
  Error e = *this;
  e.message_ = fmt::format("{}: {}", context, message_);
  return e;
}

}  // namespace fp
