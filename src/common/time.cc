#include "common/time.h"

#include <fmt/format.h>

#include <ctime>

namespace fp {

std::string FormatRfc3339(Timestamp t) {
  time_t secs = static_cast<time_t>(t / 1000000);
  int64_t micros = t % 1000000;
  if (micros < 0) {
    micros += 1000000;
    --secs;
  }
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, micros);
}

std::optional<Timestamp> ParseRfc3339(std::string_view text) {
  size_t pos = 0;
  auto digits = [&](size_t n) -> std::optional<int> {
    if (pos + n > text.size()) return std::nullopt;
    int v = 0;
    for (size_t i = 0; i < n; ++i) {
      char c = text[pos + i];
      if (c < '0' || c > '9') return std::nullopt;
      v = v * 10 + (c - '0');
    }
    pos += n;
    return v;
  };
  auto expect = [&](std::string_view chars) {
    if (pos < text.size() && chars.find(text[pos]) != std::string_view::npos) {
      ++pos;
      return true;
    }
    return false;
  };
  auto year = digits(4);
  if (!year || !expect("-")) return std::nullopt;
  auto month = digits(2);
  if (!month || !expect("-")) return std::nullopt;
  auto day = digits(2);
  if (!day || !expect("Tt ")) return std::nullopt;
  auto hour = digits(2);
  if (!hour || !expect(":")) return std::nullopt;
  auto minute = digits(2);
  if (!minute || !expect(":")) return std::nullopt;
  auto second = digits(2);
  if (!second) return std::nullopt;
  int64_t micros = 0;
  if (expect(".")) {
    int n = 0;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      if (n < 6) micros = micros * 10 + (text[pos] - '0');
      ++n;
      ++pos;
    }
    if (n == 0 || n > 9) return std::nullopt;
    for (int i = n; i < 6; ++i) micros *= 10;
  }
  int64_t offset_s = 0;
  if (!expect("Zz")) {
    if (pos >= text.size() || (text[pos] != '+' && text[pos] != '-')) return std::nullopt;
    int sign = text[pos] == '-' ? -1 : 1;
    ++pos;
    auto oh = digits(2);
    if (!oh || !expect(":")) return std::nullopt;
    auto om = digits(2);
    if (!om || *oh > 23 || *om > 59) return std::nullopt;
    offset_s = sign * (int64_t{*oh} * 3600 + int64_t{*om} * 60);
  }
  if (pos != text.size()) return std::nullopt;
  static constexpr int kDays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (*month < 1 || *month > 12 || *day < 1 || *day > kDays[*month - 1] || *hour > 23 ||
      *minute > 59 || *second > 60) {
    return std::nullopt;
  }
  std::tm tm{};
  tm.tm_year = *year - 1900;
  tm.tm_mon = *month - 1;
  tm.tm_mday = *day;
  tm.tm_hour = *hour;
  tm.tm_min = *minute;
  tm.tm_sec = *second;
  time_t secs = timegm(&tm);
  std::tm back{};
  gmtime_r(&secs, &back);
  if (back.tm_mday != *day && *second != 60) return std::nullopt;  // 30 February and the like
  return (static_cast<int64_t>(secs) - offset_s) * 1000000 + micros;
}

}  // namespace fp
