#pragma once

// Validation of request input (JSON bodies, query strings, path parameters). Every error is
// InvalidRequest and names the offending field, so a client can tell what to fix.

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/error.h"
#include "common/ip.h"
#include "common/name.h"
#include "http/url.h"

namespace fp::api {

using Json = nlohmann::json;

// Parses a request body that must be a JSON object. An empty body is treated as `{}` when
// `allow_empty`. InvalidRequest (400) for: text that is not JSON, a value that is not an
// object, a field given twice in one object (`field "a.b": duplicate field \`b\``), a number
// beyond the range of a double (`field "a.b": number out of range`), and objects or arrays
// nested deeper than 128 levels; each at any depth, in known fields and unknown ones alike.
Result<Json> ParseBodyObject(const std::string& body, bool allow_empty = false);

// Field accessors on a JSON object. `field` is the field's name, `path` the dotted path used
// in messages (e.g. "address_allocator.pool_selector").
class Fields {
 public:
  Fields(const Json& object, std::string path) : obj_(object), path_(std::move(path)) {}

  bool Has(std::string_view field) const;
  bool IsNullOrAbsent(std::string_view field) const;
  Result<std::string> String(std::string_view field) const;
  Result<std::optional<std::string>> OptString(std::string_view field) const;
  // A description: a string of at most 512 characters.
  Result<std::string> Description(std::string_view field) const;
  Result<std::optional<std::string>> OptDescription(std::string_view field) const;
  Result<bool> Bool(std::string_view field) const;
  Result<std::optional<bool>> OptBool(std::string_view field) const;
  Result<Name> NameField(std::string_view field) const;
  Result<std::optional<Name>> OptName(std::string_view field) const;
  Result<NameOrId> NameOrIdField(std::string_view field) const;
  Result<IpAddr> Ip(std::string_view field) const;
  // A required integer from 0 to `max` (the API's unsigned types: uint16, uint64, ...).
  Result<uint64_t> Unsigned(std::string_view field, uint64_t max) const;
  // An object-valued field (for nested parsing); InvalidRequest if absent or not an object.
  Result<Fields> Object(std::string_view field) const;
  std::string FieldPath(std::string_view field) const;

 private:
  Result<const Json*> Get(std::string_view field) const;
  Error TypeError(std::string_view field, std::string_view expected) const;

  const Json& obj_;
  std::string path_;
};

// A parsed query string (http::ParseQuery); values are percent-decoded.
class Query {
 public:
  static Result<Query> Parse(const std::string& raw);
  std::optional<std::string> Get(const std::string& key) const;
  Result<std::optional<NameOrId>> OptNameOrId(const std::string& key) const;
  Result<NameOrId> RequiredNameOrId(const std::string& key) const;
  Result<std::optional<IpVersion>> OptIpVersion(const std::string& key) const;

 private:
  http::QueryParams values_;
};

// Message prefix for a body error about `field`.
Error BodyError(std::string_view field, std::string_view message);

}  // namespace fp::api
