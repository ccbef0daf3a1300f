#pragma once

// Who may do what: the roles a token carries and the token itself.

#include <optional>
#include <string>
#include <string_view>

#include "common/time.h"
#include "common/uuid.h"

namespace fp::model {

enum class Role { kFleetAdmin, kSiloAdmin, kSiloCollaborator, kSiloViewer };
std::string_view ToString(Role r);
std::optional<Role> ParseRole(std::string_view text);

// An API token as the server knows it after authentication (never its secret).
struct Token {
  Uuid id;
  Uuid silo_id;
  Role role = Role::kSiloViewer;
  std::string name;
};

// A local user of a silo (Oxide's User), without its password hash.
struct SiloUser {
  Uuid id;
  Uuid silo_id;
  std::string name;  // Oxide's external_id: what the user logs in with
  Role role = Role::kSiloViewer;
  bool can_log_in = false;  // has a password
  Timestamp time_created = 0;
  Timestamp time_modified = 0;
};

// A token as listed: never its secret, which is not kept.
struct TokenListing {
  Token token;
  Timestamp time_created = 0;
};

}  // namespace fp::model
