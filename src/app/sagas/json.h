#pragma once

// How app/'s sagas write values in their log, and typed reading of a saga's parameters and node
// outputs. Each saga declares its parameters and the outputs later nodes read as structs with
// nlohmann's type macros, beside its DAG and actions (app/sagas/<saga>.h); a struct's field
// names are the JSON keys in the log. Those keys never change: a saga logged by an older binary
// must still decode after an upgrade, when recovery resumes it (app/saga_log_compat_test.cc holds
// logs as the string-keyed code before these structs wrote them).
//
// Structs whose older writers left keys out use the _WITH_DEFAULT macro (an absent key reads
// as the struct's default, as the older readers' `value(key, default)` did); the others use the
// strict macro (an absent key does not decode). A value that does not decode is an Internal
// error: the engine wrote it.

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/ip.h"
#include "common/name.h"
#include "common/uuid.h"
#include "model/ip_pools.h"
#include "saga/saga.h"

namespace fp {

// The text in `j`, or nlohmann's type_error if it holds none.
const std::string& JsonText(const nlohmann::json& j);

// A UUID as its canonical text; an address as its text form; an IP version as "v4" or "v6".
// Reading text that is none of these throws nlohmann's other_error.
void to_json(nlohmann::json& j, const Uuid& v);
void from_json(const nlohmann::json& j, Uuid& v);
void to_json(nlohmann::json& j, const IpAddr& v);
void from_json(const nlohmann::json& j, IpAddr& v);
void to_json(nlohmann::json& j, const IpVersion& v);
void from_json(const nlohmann::json& j, IpVersion& v);

}  // namespace fp

namespace nlohmann {

// std::optional as null or its value (nlohmann 3.11.2 has no std::optional support).
template <class T>
struct adl_serializer<std::optional<T>> {
  static void to_json(json& j, const std::optional<T>& v) {
    if (v) {
      j = *v;
    } else {
      j = nullptr;
    }
  }
  static void from_json(const json& j, std::optional<T>& v) {
    if (j.is_null()) {
      v.reset();
    } else {
      v.emplace(j.template get<T>());
    }
  }
};

// A name or id as its text (NameOrId has no empty value to read into).
template <>
struct adl_serializer<fp::NameOrId> {
  static void to_json(json& j, const fp::NameOrId& v);
  static fp::NameOrId from_json(const json& j);
};

}  // namespace nlohmann

namespace fp::app {

// `j` as a T; Internal naming `what` if it does not decode.
template <class T>
Result<T> Decode(const saga::Json& j, std::string_view what) {
  try {
    return j.get<T>();
  } catch (const saga::Json::exception& e) {
    return Fail(Error::Internal(fmt::format("saga {} is malformed: {}", what, e.what())));
  }
}

// The saga's parameters as a T.
template <class T>
Result<T> ParamsOf(const saga::ActionContext& ctx) {
  return Decode<T>(ctx.params(), "parameters");
}

// The recorded output of the earlier node `node` as a T; Internal if that node has not
// succeeded.
template <class T>
Result<T> OutputOf(const saga::ActionContext& ctx, const std::string& node) {
  // Read in place, and the error's words written only for an error: a dataplane node reads
  // its begin node's output once per attach and detach.
  const saga::Json* output = FP_TRY(ctx.Output(node));
  try {
    return output->get<T>();
  } catch (const saga::Json::exception& e) {
    return Fail(Error::Internal(
        fmt::format("saga output of node \"{}\" is malformed: {}", node, e.what())));
  }
}

// How saga parameters hold a pool selector: `pool` for an explicit pool, else `ip_version` (or
// neither) for the silo's default pool.
model::PoolSelector SelectorOf(const std::optional<NameOrId>& pool,
                               const std::optional<IpVersion>& ip_version);
// The inverse: {pool, ip_version}, at most one set.
std::pair<std::optional<NameOrId>, std::optional<IpVersion>> SelectorFields(
    const model::PoolSelector& selector);

}  // namespace fp::app
