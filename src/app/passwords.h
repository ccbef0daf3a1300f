#pragma once

// Passwords of local users: stored only as Argon2id hashes (Debian's libargon2), in the
// encoded form that carries its own parameters and salt ("$argon2id$v=19$m=...").

#include <string>
#include <string_view>

#include "common/error.h"
#include "common/random.h"

namespace fp::app {

// Oxide's limit for a password (Password: at most 512 bytes).
inline constexpr size_t kMaxPasswordBytes = 512;

// The rules a new password must meet: InvalidRequest naming the field otherwise.
Status CheckNewPassword(std::string_view password, std::string_view field);

// An Argon2id hash of `password` with a fresh random salt (OWASP's minimum cost: 19 MiB, 2
// passes, one lane: some tens of milliseconds).
Result<std::string> HashPassword(std::string_view password, Random& random);

// Whether `password` matches `encoded` (a HashPassword result). A hash that is not Argon2id
// never matches.
bool PasswordMatches(std::string_view password, const std::string& encoded);

// Takes as long as PasswordMatches against a real hash, and matches nothing: what a login for
// a user who does not exist (or has no password) spends, so that its 401 comes in about the
// same time as a wrong password's.
void SpendAsLongAsAPasswordCheck(std::string_view password);

}  // namespace fp::app
