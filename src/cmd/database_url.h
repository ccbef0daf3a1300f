#pragma once

// The `--database` setting of `floatplane server`: which engine, and where its data lives.

#include <filesystem>
#include <string>
#include <string_view>

#include "common/error.h"

namespace fp::cmd {

enum class DatabaseEngine { kSqlite, kPostgres };

struct DatabaseSetting {
  DatabaseEngine engine = DatabaseEngine::kSqlite;
  // kSqlite: the database file's path. kPostgres: the libpq connection URL, as given.
  std::string target;
};

// Parses a `--database` value:
//   ""                                   the SQLite file DATA_DIR/floatplane.db (the default)
//   "sqlite:PATH"                        the SQLite file PATH (relative to the working directory)
//   "postgres://..." | "postgresql://..." a PostgreSQL database by libpq URL, multi-host form
//                                        (h1:5432,h2:5432) and parameters included; libpq checks
//                                        the rest when the server connects
// Errors: InvalidRequest naming the value's problem (an unknown scheme, an empty path or
// host part); the caller names the flag or config key.
Result<DatabaseSetting> ParseDatabaseSetting(std::string_view value,
                                             const std::filesystem::path& data_dir);

// `url` with its password hidden, for logs and error messages: the password of the URL's user
// part (postgres://user:SECRET@host, any scheme) and every `password=` query parameter become
// "redacted". Anything that is not a SCHEME://... URL comes back unchanged.
std::string RedactDatabaseUrl(std::string_view url);

// What the startup log says of the database: "sqlite PATH" or "postgres URL" (redacted).
std::string DescribeDatabase(const DatabaseSetting& setting);

}  // namespace fp::cmd
