#include "common/log.h"

#include <atomic>
#include <cstdio>

#include "common/mutex.h"
#include "common/time.h"

namespace fp {

namespace {
std::atomic<LogLevel> g_level{LogLevel::kInfo};
}  // namespace

std::optional<LogLevel> ParseLogLevel(std::string_view text) {
  if (text == "debug") return LogLevel::kDebug;
  if (text == "info") return LogLevel::kInfo;
  if (text == "warn") return LogLevel::kWarn;
  if (text == "error") return LogLevel::kError;
  return std::nullopt;
}

void SetLogLevel(LogLevel level) { g_level.store(level, std::memory_order_relaxed); }

void LogEvent(std::string_view level, std::string_view msg, nlohmann::json fields) {
  std::optional<LogLevel> parsed = ParseLogLevel(level);
  if (parsed && *parsed < g_level.load(std::memory_order_relaxed)) return;
  static Mutex mu;
  nlohmann::json line = nlohmann::json::object();
  line["time"] = FormatRfc3339(SystemClock().Now());
  line["level"] = level;
  line["msg"] = msg;
  if (fields.is_object()) {
    for (auto& [k, v] : fields.items()) line[k] = v;
  }
  std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  MutexLock lock(mu);
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
}

}  // namespace fp
