#include "app/passwords.h"

#include <argon2.h>
#include <fmt/format.h>

#include <array>
#include <vector>

namespace fp::app {

namespace {

constexpr uint32_t kPasses = 2;
constexpr uint32_t kMemoryKiB = 19 * 1024;
constexpr uint32_t kLanes = 1;
constexpr size_t kSaltBytes = 16;
constexpr size_t kHashBytes = 32;

Result<std::string> Encode(std::string_view password, const std::array<uint8_t, kSaltBytes>& salt) {
  size_t length = argon2_encodedlen(kPasses, kMemoryKiB, kLanes, kSaltBytes, kHashBytes, Argon2_id);
  std::vector<char> encoded(length);
  int rc =
      argon2id_hash_encoded(kPasses, kMemoryKiB, kLanes, password.data(), password.size(),
                            salt.data(), salt.size(), kHashBytes, encoded.data(), encoded.size());
  if (rc != ARGON2_OK) {
    return Fail(Error::Internal(fmt::format("argon2id: {}", argon2_error_message(rc))));
  }
  return std::string(encoded.data());
}

}  // namespace

Status CheckNewPassword(std::string_view password, std::string_view field) {
  if (password.size() < 8) {
    return Fail(Error::InvalidRequest(
        fmt::format("{}: a password must be at least 8 characters long", field)));
  }
  if (password.size() > kMaxPasswordBytes) {
    return Fail(Error::InvalidRequest(
        fmt::format("{}: a password may be at most {} bytes long", field, kMaxPasswordBytes)));
  }
  return Ok();
}

Result<std::string> HashPassword(std::string_view password, Random& random) {
  std::array<uint8_t, kSaltBytes> salt{};
  random.Fill(salt.data(), salt.size());
  return Encode(password, salt);
}

bool PasswordMatches(std::string_view password, const std::string& encoded) {
  if (encoded.rfind("$argon2id$", 0) != 0 || password.size() > kMaxPasswordBytes) return false;
  return argon2id_verify(encoded.c_str(), password.data(), password.size()) == ARGON2_OK;
}

void SpendAsLongAsAPasswordCheck(std::string_view password) {
  static const std::string decoy = [] {
    std::array<uint8_t, kSaltBytes> salt{};
    auto hash = Encode("not anyone's password", salt);
    return hash ? *hash : std::string();
  }();
  (void)PasswordMatches(password.substr(0, kMaxPasswordBytes), decoy);
}

}  // namespace fp::app
