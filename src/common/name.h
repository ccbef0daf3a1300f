#pragma once

#include <string>
#include <string_view>
#include <variant>

#include "common/error.h"
#include "common/uuid.h"

namespace fp {

// A user-chosen resource name: `^[a-z]([a-zA-Z0-9-]*[a-zA-Z0-9]+)?$`, at most 63 characters,
// and not itself a UUID.
class Name {
 public:
  // Returns the name, or InvalidRequest explaining which rule the text breaks.
  static Result<Name> Parse(std::string_view text);

  const std::string& str() const { return value_; }
  bool operator==(const Name&) const = default;

 private:
  explicit Name(std::string value) : value_(std::move(value)) {}
  std::string value_;
};

// A selector that is either a UUID or a Name (Oxide's NameOrId).
class NameOrId {
 public:
  // A UUID-shaped string is an id; anything else must be a valid Name.
  static Result<NameOrId> Parse(std::string_view text);

  bool is_id() const { return std::holds_alternative<Uuid>(value_); }
  const Uuid& id() const { return std::get<Uuid>(value_); }
  const Name& name() const { return std::get<Name>(value_); }
  std::string ToString() const { return is_id() ? id().ToString() : name().str(); }

  explicit NameOrId(Uuid id) : value_(id) {}
  explicit NameOrId(Name name) : value_(std::move(name)) {}

 private:
  std::variant<Uuid, Name> value_;
};

}  // namespace fp
