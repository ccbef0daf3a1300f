#include "cmd/database_url.h"

#include <fmt/format.h>

#include <cctype>

namespace fp::cmd {

namespace {

constexpr std::string_view kSqlitePrefix = "sqlite:";
constexpr std::string_view kRedacted = "redacted";

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// The length of a "postgres://" or "postgresql://" prefix of `value`, or 0.
size_t PostgresSchemeLength(std::string_view value) {
  for (std::string_view scheme : {"postgresql://", "postgres://"}) {
    if (StartsWith(value, scheme)) return scheme.size();
  }
  return 0;
}

// The length of a "SCHEME://" prefix of `value` (any URL scheme), or 0.
size_t AnySchemeLength(std::string_view value) {
  size_t end = value.find("://");
  if (end == std::string_view::npos || end == 0) return 0;
  for (char c : value.substr(0, end)) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.') return 0;
  }
  return end + 3;
}

}  // namespace

Result<DatabaseSetting> ParseDatabaseSetting(std::string_view value,
                                             const std::filesystem::path& data_dir) {
  if (value.empty()) {
    return DatabaseSetting{DatabaseEngine::kSqlite, (data_dir / "floatplane.db").string()};
  }
  if (StartsWith(value, kSqlitePrefix)) {
    std::string_view path = value.substr(kSqlitePrefix.size());
    if (path.empty()) {
      return Fail(
          Error::InvalidRequest("\"sqlite:\" needs a file path, e.g. sqlite:/var/lib/"
                                "floatplane/floatplane.db"));
    }
    return DatabaseSetting{DatabaseEngine::kSqlite, std::string(path)};
  }
  if (size_t scheme = PostgresSchemeLength(value); scheme > 0) {
    // libpq accepts "postgres://" alone (every part from the environment and defaults); a
    // server's database is named explicitly, so at least a host or a database is asked for.
    if (value.size() == scheme) {
      return Fail(Error::InvalidRequest(
          "a PostgreSQL URL names a host and a database, e.g. postgres://floatplane@db1:5432/"
          "floatplane"));
    }
    return DatabaseSetting{DatabaseEngine::kPostgres, std::string(value)};
  }
  return Fail(Error::InvalidRequest(
      fmt::format("\"{}\" is no database URL: expected postgres://..., postgresql://... or "
                  "sqlite:PATH",
                  RedactDatabaseUrl(value))));
}

std::string RedactDatabaseUrl(std::string_view url) {
  size_t scheme = AnySchemeLength(url);
  if (scheme == 0) return std::string(url);
  std::string out(url.substr(0, scheme));
  std::string_view rest = url.substr(scheme);
  // The authority ends at the first '/', '?' or '#'; its user part at its last '@'.
  size_t authority_end = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, authority_end);
  size_t at = authority.rfind('@');
  if (at != std::string_view::npos) {
    std::string_view userinfo = authority.substr(0, at);
    size_t colon = userinfo.find(':');
    if (colon != std::string_view::npos) {
      out += userinfo.substr(0, colon + 1);
      out += kRedacted;
      out += authority.substr(at);
    } else {
      out += authority;
    }
  } else {
    out += authority;
  }
  if (authority_end == std::string_view::npos) return out;
  rest = rest.substr(authority_end);
  size_t query = rest.find('?');
  out += rest.substr(0, query);
  if (query == std::string_view::npos) return out;
  // Each parameter of the query: password=... (any case, as libpq's keywords are not) hidden.
  rest = rest.substr(query);
  while (!rest.empty()) {
    out += rest.front();  // '?' or '&'
    rest.remove_prefix(1);
    size_t end = rest.find_first_of("&#");
    std::string_view param = rest.substr(0, end);
    std::string lower(param.substr(0, 9));
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == "password=") {
      out += param.substr(0, 9);
      out += kRedacted;
    } else {
      out += param;
    }
    if (end == std::string_view::npos) break;
    rest = rest.substr(end);
    if (rest.front() == '#') {
      out += rest;
      break;
    }
  }
  return out;
}

std::string DescribeDatabase(const DatabaseSetting& setting) {
  if (setting.engine == DatabaseEngine::kSqlite) return "sqlite " + setting.target;
  return "postgres " + RedactDatabaseUrl(setting.target);
}

}  // namespace fp::cmd
