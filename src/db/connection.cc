#include "db/connection.h"

namespace fp::db {

int64_t Row::Int(size_t i) const {
  const SqlValue& v = values_.at(i);
  if (auto* p = std::get_if<int64_t>(&v)) return *p;
  if (auto* d = std::get_if<double>(&v)) return static_cast<int64_t>(*d);
  return 0;
}

double Row::Double(size_t i) const {
  const SqlValue& v = values_.at(i);
  if (auto* d = std::get_if<double>(&v)) return *d;
  if (auto* p = std::get_if<int64_t>(&v)) return static_cast<double>(*p);
  return 0;
}

Row Row::Slice(size_t first, size_t count) const {
  auto begin = values_.begin() + static_cast<std::ptrdiff_t>(first);
  return Row(std::vector<SqlValue>(begin, begin + static_cast<std::ptrdiff_t>(count)));
}

const std::string& Row::Text(size_t i) const {
  static const std::string kEmpty;
  const SqlValue& v = values_.at(i);
  if (auto* s = std::get_if<std::string>(&v)) return *s;
  if (auto* b = std::get_if<Blob>(&v)) return b->bytes;
  return kEmpty;
}

Status Connection::ExecLater(std::string_view sql, const std::vector<SqlValue>& params,
                             int64_t rows, const Error& otherwise) {
  int64_t changed = FP_TRY(Exec(sql, params));
  if (rows >= 0 && changed != rows) return Fail(otherwise);
  return Ok();
}

}  // namespace fp::db
