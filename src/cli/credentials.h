#pragma once

// The Oxide CLI's configuration directory, shared with it: credentials.toml (profiles: host,
// token, ...) and config.toml (default-profile, and floatplane's `format`). Read with a TOML
// parser; written by editing the text in place, so that what a person or the oxide CLI put
// there stays as it was, and a new profile reads byte for byte as the oxide CLI writes it.

#include <optional>
#include <string>
#include <vector>

#include "cli/failure.h"

namespace fp::cli {

struct Profile {
  std::string name;
  std::string host;
  std::string token;
  std::string token_id;      // optional
  std::string user;          // the user's id, from GET /v1/me
  std::string time_expires;  // optional
};

class ConfigDir {
 public:
  // `dir` empty: $HOME/.config/oxide, the oxide CLI's (see the README on why it is shared).
  explicit ConfigDir(std::string dir);
  const std::string& path() const { return dir_; }
  std::string credentials_path() const { return dir_ + "/credentials.toml"; }
  std::string config_path() const { return dir_ + "/config.toml"; }

  // The profiles, sorted by name; none when the file does not exist. Failures (exit 3):
  // `Parse error for PATH: ...`, `IO Error: ...`.
  CliResult<std::vector<Profile>> Profiles() const;
  // config.toml's default-profile, if any.
  CliResult<std::optional<std::string>> DefaultProfile() const;
  // config.toml's `format` (floatplane's; the oxide CLI ignores it), if any.
  CliResult<std::optional<std::string>> DefaultFormat() const;

  // Adds the profile, or replaces its keys in place; creates the directory and the file
  // (mode 0600) when missing.
  CliStatus SaveProfile(const Profile& profile) const;
  // Removes the profile's table; false when there was none.
  CliResult<bool> RemoveProfile(const std::string& name) const;
  // Empties credentials.toml.
  CliStatus RemoveAllProfiles() const;
  // Sets config.toml's default-profile.
  CliStatus SetDefaultProfile(const std::string& name) const;

  // The oxide CLI's warning when credentials.toml is readable or writable by others.
  std::optional<std::string> PermissionWarning() const;

 private:
  // Writes credentials.toml after checking that `text` parses and holds `profile` as saved.
  CliStatus WriteChecked(const std::string& text, const Profile& profile) const;

  std::string dir_;
};

// `text` as a TOML basic string, quotes included.
std::string TomlString(const std::string& text);

}  // namespace fp::cli
