#include "cli/credentials.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace fp::cli {

namespace {

// The file's text; none when it does not exist.
CliResult<std::optional<std::string>> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return std::optional<std::string>();
    return Fail(CredentialsError(fmt::format("IO Error: {}: {}", path, std::strerror(errno))));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return std::optional<std::string>(text.str());
}

CliResult<toml::table> Parse(const std::string& path, const std::string& text) {
  try {
    return toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    return Fail(CredentialsError(fmt::format("Parse error for {}: {} (line {})", path,
                                             e.description(), e.source().begin.line)));
  }
}

// Writes `text` to `path`, creating its directory; a new file gets `mode`.
CliStatus WriteText(const std::string& path, const std::string& text, mode_t mode) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) {
    return Fail(CredentialsError(fmt::format("IO Error: {}: {}", path, std::strerror(errno))));
  }
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int error = errno;
      close(fd);
      return Fail(CredentialsError(fmt::format("IO Error: {}: {}", path, std::strerror(error))));
    }
    done += static_cast<size_t>(n);
  }
  close(fd);
  return {};
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();  // a CRLF file
    lines.push_back(std::move(line));
    start = end + 1;
  }
  return lines;
}

std::string Trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  size_t b = s.find_last_not_of(" \t\r");
  return s.substr(a, b - a + 1);
}

// A TOML key as written (bare, "basic" or 'literal') and what follows it; none when the text
// does not start with one.
std::optional<std::pair<std::string, std::string>> TakeKey(const std::string& text) {
  std::string t = Trim(text);
  if (t.empty()) return std::nullopt;
  if (t[0] == '"' || t[0] == '\'') {
    const char quote = t[0];
    std::string key;
    size_t i = 1;
    for (; i < t.size() && t[i] != quote; ++i) {
      if (quote == '"' && t[i] == '\\' && i + 1 < t.size()) ++i;  // an escape: taken literally
      key += t[i];
    }
    if (i >= t.size()) return std::nullopt;
    return std::make_pair(key, t.substr(i + 1));
  }
  size_t end = 0;
  while (end < t.size() &&
         (std::isalnum(static_cast<unsigned char>(t[end])) || t[end] == '_' || t[end] == '-')) {
    ++end;
  }
  if (end == 0) return std::nullopt;
  return std::make_pair(t.substr(0, end), t.substr(end));
}

// The dotted key of a `[a.b]` table header line (comments and spaces allowed); none for any
// other line (an array of tables `[[...]]` included).
std::optional<std::vector<std::string>> HeaderKeys(const std::string& line) {
  std::string t = Trim(line);
  if (t.size() < 2 || t[0] != '[' || t[1] == '[') return std::nullopt;
  std::vector<std::string> keys;
  std::string rest = t.substr(1);
  for (;;) {
    auto key = TakeKey(rest);
    if (!key) return std::nullopt;
    keys.push_back(key->first);
    rest = Trim(key->second);
    if (!rest.empty() && rest[0] == '.') {
      rest = rest.substr(1);
      continue;
    }
    if (!rest.empty() && rest[0] == ']') return keys;
    return std::nullopt;
  }
}

bool IsHeader(const std::string& line) {
  return HeaderKeys(line).has_value() || Trim(line).rfind("[[", 0) == 0;
}

bool IsProfileHeader(const std::string& line, const std::string& name) {
  auto keys = HeaderKeys(line);
  return keys && *keys == std::vector<std::string>{"profile", name};
}

// The key a `key = value` line sets (unquoted), or "" for any other line.
std::string KeyOf(const std::string& line) {
  std::string t = Trim(line);
  if (t.empty() || t[0] == '#' || t[0] == '[') return "";
  auto key = TakeKey(t);
  if (!key || Trim(key->second).rfind('=', 0) != 0) return "";
  return key->first;
}

// `[profile.NAME]`, NAME quoted unless it is a bare key.
std::string ProfileHeader(const std::string& name) {
  bool bare = !name.empty() && std::all_of(name.begin(), name.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '_' || c == '-';
  });
  return "[profile." + (bare ? name : TomlString(name)) + "]";
}

// [start, end) of the profile's table: its header and the lines up to the next header.
std::optional<std::pair<size_t, size_t>> FindProfile(const std::vector<std::string>& lines,
                                                     const std::string& name) {
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!IsProfileHeader(lines[i], name)) continue;
    size_t end = i + 1;
    while (end < lines.size() && !IsHeader(lines[end])) ++end;
    return std::make_pair(i, end);
  }
  return std::nullopt;
}

std::string Join(const std::vector<std::string>& lines, bool final_newline, bool crlf) {
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    out += lines[i];
    if (i + 1 < lines.size() || final_newline) out += crlf ? "\r\n" : "\n";
  }
  return out;
}

bool IsCrlf(const std::string& text) {
  size_t lf = text.find('\n');
  return lf != std::string::npos && lf > 0 && text[lf - 1] == '\r';
}

}  // namespace

std::string TomlString(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += fmt::format("\\u{:04X}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

ConfigDir::ConfigDir(std::string dir) : dir_(std::move(dir)) {
  if (dir_.empty()) {
    const char* home = std::getenv("HOME");
    dir_ = std::string(home ? home : ".") + "/.config/oxide";
  }
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
}

CliResult<std::vector<Profile>> ConfigDir::Profiles() const {
  std::vector<Profile> out;
  auto text = FP_TRY(ReadText(credentials_path()));
  if (!text) return out;
  toml::table t = FP_TRY(Parse(credentials_path(), *text));
  const toml::table* profiles = t["profile"].as_table();
  if (profiles == nullptr) return out;
  for (const auto& [key, value] : *profiles) {
    const toml::table* p = value.as_table();
    if (p == nullptr) continue;
    Profile profile;
    profile.name = std::string(key.str());
    auto get = [&](const char* k) { return (*p)[k].value_or(std::string()); };
    profile.host = get("host");
    profile.token = get("token");
    profile.token_id = get("token_id");
    profile.user = get("user");
    profile.time_expires = get("time_expires");
    if (profile.host.empty() || profile.token.empty()) {
      return Fail(CredentialsError(
          fmt::format("Parse error for {}: profile \"{}\" needs both `host` and `token`",
                      credentials_path(), profile.name)));
    }
    out.push_back(std::move(profile));
  }
  std::sort(out.begin(), out.end(),
            [](const Profile& a, const Profile& b) { return a.name < b.name; });
  return out;
}

CliResult<std::optional<std::string>> ConfigDir::DefaultProfile() const {
  auto text = FP_TRY(ReadText(config_path()));
  if (!text) return std::optional<std::string>();
  toml::table t = FP_TRY(Parse(config_path(), *text));
  if (auto v = t["default-profile"].value<std::string>()) return std::optional<std::string>(*v);
  return std::optional<std::string>();
}

CliResult<std::optional<std::string>> ConfigDir::DefaultFormat() const {
  auto text = FP_TRY(ReadText(config_path()));
  if (!text) return std::optional<std::string>();
  toml::table t = FP_TRY(Parse(config_path(), *text));
  if (auto v = t["format"].value<std::string>()) return std::optional<std::string>(*v);
  return std::optional<std::string>();
}

CliStatus ConfigDir::SaveProfile(const Profile& profile) const {
  std::string text = FP_TRY(ReadText(credentials_path())).value_or("");
  std::vector<std::pair<std::string, std::string>> keys = {{"host", profile.host},
                                                           {"token", profile.token}};
  if (!profile.token_id.empty()) keys.emplace_back("token_id", profile.token_id);
  if (!profile.user.empty()) keys.emplace_back("user", profile.user);
  if (!profile.time_expires.empty()) keys.emplace_back("time_expires", profile.time_expires);
  std::vector<std::string> lines = Lines(text);
  if (auto found = FindProfile(lines, profile.name)) {
    auto [start, end] = *found;
    size_t last = start;  // the table's last key line
    for (size_t i = start + 1; i < end; ++i) {
      if (!KeyOf(lines[i]).empty()) last = i;
    }
    for (const auto& kv : keys) {
      const std::string& key = kv.first;
      std::string line = key + " = " + TomlString(kv.second);
      auto it = std::find_if(lines.begin() + static_cast<long>(start) + 1,
                             lines.begin() + static_cast<long>(end),
                             [&](const std::string& l) { return KeyOf(l) == key; });
      if (it != lines.begin() + static_cast<long>(end)) {
        *it = line;
      } else {
        lines.insert(lines.begin() + static_cast<long>(++last), line);
        ++end;
      }
    }
    return WriteChecked(Join(lines, true, IsCrlf(text)), profile);
  }
  const std::string eol = IsCrlf(text) ? "\r\n" : "\n";
  std::string table = ProfileHeader(profile.name) + eol;
  for (const auto& [key, value] : keys) table += key + " = " + TomlString(value) + eol;
  if (!Trim(text).empty()) {
    if (text.back() != '\n') text += eol;
    text += eol;
  } else {
    text.clear();
  }
  return WriteChecked(text + table, profile);
}

CliStatus ConfigDir::WriteChecked(const std::string& text, const Profile& profile) const {
  // The edit is checked before it replaces the file: a layout this in-place edit does not
  // understand (dotted keys, say) must not leave a file no tool can read.
  toml::table t;
  try {
    t = toml::parse(text, credentials_path());
  } catch (const toml::parse_error& e) {
    return Fail(CredentialsError(fmt::format(
        "cannot update {} in place for profile \"{}\" ({}); edit or remove that profile by "
        "hand, then log in again",
        credentials_path(), profile.name, e.description())));
  }
  const toml::node_view<toml::node> saved = t["profile"][profile.name];
  if (saved["host"].value_or(std::string()) != profile.host ||
      saved["token"].value_or(std::string()) != profile.token) {
    return Fail(CredentialsError(fmt::format(
        "cannot update {} in place for profile \"{}\"; edit or remove that profile by hand, "
        "then log in again",
        credentials_path(), profile.name)));
  }
  return WriteText(credentials_path(), text, 0600);
}

CliResult<bool> ConfigDir::RemoveProfile(const std::string& name) const {
  auto text = FP_TRY(ReadText(credentials_path()));
  if (!text) return false;
  std::vector<std::string> lines = Lines(*text);
  auto found = FindProfile(lines, name);
  if (!found) return false;
  auto [start, end] = *found;
  // The blank line that separated it from the table before goes with it.
  if (start > 0 && Trim(lines[start - 1]).empty()) --start;
  lines.erase(lines.begin() + static_cast<long>(start), lines.begin() + static_cast<long>(end));
  FP_CHECK_OK(WriteText(credentials_path(), Join(lines, !lines.empty(), IsCrlf(*text)), 0600));
  return true;
}

CliStatus ConfigDir::RemoveAllProfiles() const { return WriteText(credentials_path(), "", 0600); }

CliStatus ConfigDir::SetDefaultProfile(const std::string& name) const {
  std::string text = FP_TRY(ReadText(config_path())).value_or("");
  std::vector<std::string> lines = Lines(text);
  const std::string line = "default-profile = " + TomlString(name);
  for (std::string& l : lines) {
    if (IsHeader(l)) break;
    if (KeyOf(l) == "default-profile") {
      l = line;
      return WriteText(config_path(), Join(lines, true, IsCrlf(text)), 0644);
    }
  }
  lines.insert(lines.begin(), line);
  return WriteText(config_path(), Join(lines, true, IsCrlf(text)), 0644);
}

std::optional<std::string> ConfigDir::PermissionWarning() const {
  struct stat st {};
  if (stat(credentials_path().c_str(), &st) != 0) return std::nullopt;
  if ((st.st_mode & 077) == 0) return std::nullopt;
  return fmt::format(
      "WARNING: {:o} permissions on \"{}\" may allow other users to access your login "
      "credentials.",
      st.st_mode & 0777, credentials_path());
}

}  // namespace fp::cli
