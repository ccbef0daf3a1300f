#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

namespace fp {

// Log levels, least severe first. Lines below the process's level (SetLogLevel; info unless
// set) are dropped before they are formatted.
enum class LogLevel { kDebug, kInfo, kWarn, kError };

// "debug", "info", "warn" or "error"; nullopt for anything else.
std::optional<LogLevel> ParseLogLevel(std::string_view text);
// Thread-safe; lines being written meanwhile follow either level.
void SetLogLevel(LogLevel level);

// Writes one JSON log line to stderr: {"time": ..., "level": ..., "msg": ..., <fields>}, if
// `level` (one of the names above; an unknown name is always written) is at or above the
// process's level. Thread-safe; lines never interleave.
void LogEvent(std::string_view level, std::string_view msg, nlohmann::json fields = {});

}  // namespace fp
