#pragma once

// Reading a saga's JSON parameters and node outputs inside app actions (instance_sagas.cc,
// external_ips.cc). A missing or malformed value is an internal error: the engine wrote them.

#include <fmt/format.h>

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

}  // namespace fp::app
