#include "common/time.h"

#include <fmt/format.h>

#include <ctime>

namespace fp {

std::string FormatRfc3339(Timestamp t) {
  int64_t secs = t / 1000000;
  int64_t micros = t % 1000000;
  if (micros < 0) {
    micros += 1000000;
    --secs;
  }
  // The civil date of the day (the proleptic Gregorian calendar, days counted from 1970-01-01
  // in eras of 400 years), computed here: glibc's gmtime_r takes its time zone lock at every
  // call, and every log line and every view of a resource writes a time (0.7% of a --dev
  // server's samples with fmt's formatting).
  int64_t days = secs / 86400;
  int64_t second_of_day = secs % 86400;
  if (second_of_day < 0) {
    second_of_day += 86400;
    --days;
  }
  const int64_t z = days + 719468;  // days from 0000-03-01
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const int64_t day_of_era = z - era * 146097;
  const int64_t year_of_era =
      (day_of_era - day_of_era / 1460 + day_of_era / 36524 - day_of_era / 146096) / 365;
  const int64_t day_of_year =
      day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
  const int64_t month_from_march = (5 * day_of_year + 2) / 153;
  const int64_t day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
  const int64_t month = month_from_march < 10 ? month_from_march + 3 : month_from_march - 9;
  const int64_t year = year_of_era + era * 400 + (month <= 2 ? 1 : 0);
  if (year < 0 || year > 9999) {
    // Years RFC 3339 cannot write in four digits: as fmt writes them.
    return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z", year, month, day,
                       second_of_day / 3600, second_of_day / 60 % 60, second_of_day % 60, micros);
  }
  char text[] = "0000-00-00T00:00:00.000000Z";
  auto put = [&text](size_t at, int64_t value, int width) {
    for (int i = width - 1; i >= 0; --i) {
      text[at + static_cast<size_t>(i)] = static_cast<char>('0' + value % 10);
      value /= 10;
    }
  };
  put(0, year, 4);
  put(5, month, 2);
  put(8, day, 2);
  put(11, second_of_day / 3600, 2);
  put(14, second_of_day / 60 % 60, 2);
  put(17, second_of_day % 60, 2);
  put(20, micros, 6);
  return std::string(text, sizeof text - 1);
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
