#pragma once

// Reading a saga's JSON parameters and node outputs inside app actions (instance_sagas.cc,
// external_ips.cc). A missing or malformed value is an internal error: the engine wrote them.

#include <fmt/format.h>

#include <optional>
#include <string>

#include "common/error.h"
#include "common/uuid.h"
#include "saga/saga.h"

namespace fp::app {

inline Result<Uuid> UuidParam(const saga::Json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_string()) {
    return Fail(Error::Internal(fmt::format("saga parameter \"{}\" missing", key)));
  }
  auto id = Uuid::Parse(j[key].get<std::string>());
  if (!id) return Fail(Error::Internal(fmt::format("saga parameter \"{}\" is not a UUID", key)));
  return *id;
}

// An optional UUID: absent or null is std::nullopt.
inline Result<std::optional<Uuid>> OptUuidParam(const saga::Json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::optional<Uuid>();
  return std::optional<Uuid>(FP_TRY(UuidParam(j, key)));
}

// How a record in a saga output holds an optional UUID (read back by OptUuidParam).
inline saga::Json OptUuidJson(const std::optional<Uuid>& v) {
  return v ? saga::Json(v->ToString()) : saga::Json(nullptr);
}

}  // namespace fp::app
