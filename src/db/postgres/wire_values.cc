#include "db/postgres/wire_values.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <string_view>

#include "db/postgres/libpq.h"

namespace fp::db::postgres {

BoundParams::BoundParams(const std::vector<SqlValue>& params)
    : text(params.size()),
      values(params.size(), nullptr),
      lengths(params.size(), 0),
      formats(params.size(), 0) {
  for (size_t i = 0; i < params.size(); ++i) {
    const SqlValue& p = params[i];
    if (auto* v = std::get_if<int64_t>(&p)) {
      text[i] = std::to_string(*v);
      values[i] = text[i].c_str();
    } else if (auto* d = std::get_if<double>(&p)) {
      text[i] = fmt::format("{}", *d);  // shortest text that reads back as the same double
      values[i] = text[i].c_str();
    } else if (auto* s = std::get_if<std::string>(&p)) {
      values[i] = s->c_str();
    } else if (auto* b = std::get_if<Blob>(&p)) {
      values[i] = b->bytes.data();
      lengths[i] = static_cast<int>(b->bytes.size());
      formats[i] = 1;
    }
  }
}

Result<SqlValue> DecodeValue(const PGresult* r, int row, int col, Oid type) {
  if (PQgetisnull(r, row, col)) return SqlValue(nullptr);
  const char* v = PQgetvalue(r, row, col);
  size_t len = static_cast<size_t>(PQgetlength(r, row, col));
  std::string_view text(v, len);
  switch (type) {
    case kInt2Oid:
    case kInt4Oid:
    case kInt8Oid: {
      int64_t n = 0;
      std::from_chars(text.data(), text.data() + text.size(), n);
      return n;
    }
    case kBoolOid:
      return int64_t{text == "t" ? 1 : 0};
    case kNumericOid: {
      if (text.find_first_of(".eEN") == std::string_view::npos) {
        int64_t n = 0;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
        if (ec == std::errc() && end == text.data() + text.size()) return n;
      }
      return std::strtod(std::string(text).c_str(), nullptr);
    }
    case kFloat4Oid:
    case kFloat8Oid:
      return std::strtod(std::string(text).c_str(), nullptr);
    case kByteaOid: {
      Blob b;
      if (!DecodeByteaHex(text, b.bytes)) {
        return Fail(Error::Internal("a bytea result is not in the hex format (bytea_output)"));
      }
      return b;
    }
    default:
      return std::string(text);
  }
}

}  // namespace fp::db::postgres
