#include "common/log.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/time.h"

namespace fp {

namespace {

std::atomic<LogLevel> g_level{LogLevel::kInfo};

// Writes one rendered line and its newline; lines never interleave.
void WriteLine(std::string& text) {
  static Mutex mu;
  text.push_back('\n');
  MutexLock lock(mu);
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

// By LogLevel's value.
constexpr std::array<std::string_view, 4> kLevelNames = {"debug", "info", "warn", "error"};

std::string_view LevelName(LogLevel level) {
  const auto i = static_cast<size_t>(level);
  return i < kLevelNames.size() ? kLevelNames[i] : "info";
}

// `s` as a JSON string, as nlohmann's dump writes it with invalid UTF-8 replaced: printable
// ASCII without quotes or backslashes (methods, paths, ids: nearly every value) is copied as
// it is; anything else goes through nlohmann.
void AppendJsonString(std::string& out, std::string_view s) {
  const bool plain = std::all_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u >= 0x20 && u < 0x80 && c != '"' && c != '\\';
  });
  if (!plain) {
    out += nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return;
  }
  out.push_back('"');
  out.append(s);
  out.push_back('"');
}

}  // namespace

std::optional<LogLevel> ParseLogLevel(std::string_view text) {
  for (size_t i = 0; i < kLevelNames.size(); ++i) {
    if (text == kLevelNames[i]) return static_cast<LogLevel>(i);
  }
  return std::nullopt;
}

void SetLogLevel(LogLevel level) { g_level.store(level, std::memory_order_relaxed); }

bool LogEnabled(LogLevel level) { return level >= g_level.load(std::memory_order_relaxed); }

void LogEvent(std::string_view level, std::string_view msg, nlohmann::json fields) {
  std::optional<LogLevel> parsed = ParseLogLevel(level);
  if (parsed && !LogEnabled(*parsed)) return;
  // The line is `fields` with the time, level and message added where it lacks them (a field
  // of the same name wins): built in place, not copied into a second object, since every
  // request the servers answer logs one (the agents' included, in process with --dev).
  if (!fields.is_object()) fields = nlohmann::json::object();
  fields.emplace("time", FormatRfc3339(SystemClock().Now()));
  fields.emplace("level", level);
  fields.emplace("msg", msg);
  std::string text = fields.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  WriteLine(text);
}

void LogFields(LogLevel level, std::string_view msg, std::span<const LogField> fields) {
  if (!LogEnabled(level)) return;
  const std::string time = FormatRfc3339(SystemClock().Now());
  std::vector<LogField> all(fields.begin(), fields.end());
  // The line's own three go first, so that a field of the same name, later, replaces them.
  all.insert(all.begin(),
             {{"time", std::string_view(time)}, {"level", LevelName(level)}, {"msg", msg}});
  // By name (a JSON object's order in nlohmann), the last of a name kept.
  std::stable_sort(all.begin(), all.end(),
                   [](const LogField& a, const LogField& b) { return a.name < b.name; });
  std::string text;
  text.reserve(256);
  text.push_back('{');
  for (size_t i = 0; i < all.size(); ++i) {
    if (i + 1 < all.size() && all[i + 1].name == all[i].name) continue;
    if (text.size() > 1) text.push_back(',');
    AppendJsonString(text, all[i].name);
    text.push_back(':');
    const auto& value = all[i].value;
    if (const auto* s = std::get_if<std::string_view>(&value)) {
      AppendJsonString(text, *s);
    } else if (const auto* n = std::get_if<int64_t>(&value)) {
      fmt::format_to(std::back_inserter(text), "{}", *n);
    } else {
      text += nlohmann::json(std::get<double>(value)).dump();
    }
  }
  text.push_back('}');
  WriteLine(text);
}

}  // namespace fp
