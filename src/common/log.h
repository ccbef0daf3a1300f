#pragma once

#include <nlohmann/json.hpp>

namespace fp {

// Writes one JSON log line to stderr: {"time": ..., "level": ..., "msg": ..., <fields>}.
// Thread-safe; lines never interleave.
void LogEvent(std::string_view level, std::string_view msg, nlohmann::json fields = {});

}  // namespace fp
