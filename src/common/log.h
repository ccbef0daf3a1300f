#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string_view>
#include <variant>

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

// Whether a line at `level` is written (at or above the process's level).
bool LogEnabled(LogLevel level);

// One field of LogFields: a name and a string, integer or floating-point value. The views
// must outlive the call.
struct LogField {
  std::string_view name;
  std::variant<std::string_view, int64_t, double> value;
};

// LogEvent for lines written on every request: the same line, byte for byte, as LogEvent
// writes for these fields as a JSON object (names in order, a field named time, level or msg
// in place of the line's own, text that is not UTF-8 replaced), rendered without building
// one. A name given twice: the later value.
void LogFields(LogLevel level, std::string_view msg, std::span<const LogField> fields);

}  // namespace fp
