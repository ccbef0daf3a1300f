#include "db/postgres/libpq.h"

#include <fmt/format.h>

namespace fp::db::postgres {

std::string SqlState(const PGresult* r) {
  if (r == nullptr) return "";
  const char* state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
  return state ? std::string(state) : std::string();
}

std::string TranslatePlaceholders(std::string_view sql, int& count) {
  std::string out;
  out.reserve(sql.size() + 16);
  count = 0;
  size_t i = 0;
  while (i < sql.size()) {
    char c = sql[i];
    if (c == '\'' || c == '"') {
      // A quoted literal or identifier, its quote doubled inside: copied as it is.
      size_t end = i + 1;
      for (;;) {
        end = sql.find(c, end);
        if (end == std::string_view::npos) {
          end = sql.size();
          break;
        }
        if (end + 1 < sql.size() && sql[end + 1] == c) {
          end += 2;
          continue;
        }
        ++end;
        break;
      }
      out.append(sql.substr(i, end - i));
      i = end;
    } else if (c == '-' && i + 1 < sql.size() && sql[i + 1] == '-') {
      size_t end = sql.find('\n', i);
      if (end == std::string_view::npos) end = sql.size();
      out.append(sql.substr(i, end - i));
      i = end;
    } else if (c == '?') {
      out += fmt::format("${}", ++count);
      ++i;
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

bool DecodeByteaHex(std::string_view text, std::string& out) {
  if (text.size() < 2 || text[0] != '\\' || text[1] != 'x' || text.size() % 2 != 0) return false;
  auto nibble = [](char h) -> int {
    if (h >= '0' && h <= '9') return h - '0';
    if (h >= 'a' && h <= 'f') return h - 'a' + 10;
    if (h >= 'A' && h <= 'F') return h - 'A' + 10;
    return -1;
  };
  out.clear();
  out.reserve((text.size() - 2) / 2);
  for (size_t i = 2; i < text.size(); i += 2) {
    int hi = nibble(text[i]);
    int lo = nibble(text[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out.push_back(static_cast<char>((hi << 4) | lo));
  }
  return true;
}

std::string WithDatabase(const std::string& conninfo, const std::string& dbname) {
  if (!LoadLibpq()) return "";
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(conninfo.c_str(), &error);
  if (options == nullptr) {
    PQfreemem(error);
    return "";
  }
  auto quote = [](std::string_view v) {
    std::string q = "'";
    for (char c : v) {
      if (c == '\\' || c == '\'') q += '\\';
      q += c;
    }
    return q + "'";
  };
  std::string out;
  for (PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    std::string_view key = o->keyword;
    if (key == "dbname" || o->val == nullptr) continue;
    out += fmt::format("{}={} ", key, quote(o->val));
  }
  PQconninfoFree(options);
  return out + "dbname=" + quote(dbname);
}

}  // namespace fp::db::postgres
