#pragma once

// How the datastore's values (db/connection.h's SqlValue) cross libpq, for PgConnection: a
// statement's parameters in the form libpq takes them, and a result's columns decoded by their
// type OIDs.

#include <libpq-fe.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "db/connection.h"

namespace fp::db::postgres {

// Type OIDs (pg_type.dat): stable across PostgreSQL versions.
inline constexpr Oid kBoolOid = 16;
inline constexpr Oid kByteaOid = 17;
inline constexpr Oid kInt8Oid = 20;
inline constexpr Oid kInt2Oid = 21;
inline constexpr Oid kInt4Oid = 23;
inline constexpr Oid kTextOid = 25;
inline constexpr Oid kFloat4Oid = 700;
inline constexpr Oid kFloat8Oid = 701;
inline constexpr Oid kNumericOid = 1700;

// A statement's parameters as libpq takes them: text, except bytea in binary. Holds pointers
// into `params`, which must outlive it.
struct BoundParams {
  std::vector<std::string> text;
  std::vector<const char*> values;
  std::vector<int> lengths;
  std::vector<int> formats;

  explicit BoundParams(const std::vector<SqlValue>& params);
  int count() const { return static_cast<int>(values.size()); }
  const char* const* v() const { return values.empty() ? nullptr : values.data(); }
  const int* l() const { return lengths.empty() ? nullptr : lengths.data(); }
  const int* f() const { return formats.empty() ? nullptr : formats.data(); }
};

// The value of row `row`, column `col` of `r`, by its column type `type`: int2/int4/int8,
// integral numeric and bool (0/1) as int64, float4/float8 and other numeric as double, bytea as
// Blob, everything else as text, NULL as nullptr. Errors: Internal for a bytea value not in the
// hex format (never its text as bytes).
Result<SqlValue> DecodeValue(const PGresult* r, int row, int col, Oid type);

}  // namespace fp::db::postgres
