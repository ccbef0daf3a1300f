#pragma once

// The RAII layer over libpq that the PostgreSQL engine is written against: owning pointers for
// connections and results, and the few pure helpers the connection needs (placeholder
// translation, value decoding). No I/O happens here beyond what the libpq calls named do.

#include <libpq-fe.h>

#include <memory>
#include <string>
#include <string_view>

#include "common/error.h"

namespace fp::db::postgres {

// libpq is loaded on first use, not linked (libpq_loader.cc): Ok once it is, else Unavailable
// naming the library. PgConnection::Open asks first.
Status LoadLibpq();

struct PgConnCloser {
  void operator()(PGconn* c) const { PQfinish(c); }
};
struct PgResultClearer {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgConnPtr = std::unique_ptr<PGconn, PgConnCloser>;
using PgResultPtr = std::unique_ptr<PGresult, PgResultClearer>;

// SQLSTATEs the engine decides on.
inline constexpr std::string_view kSerializationFailure = "40001";
inline constexpr std::string_view kDeadlockDetected = "40P01";
// A statement or a lock wait that outlasted the transaction's time (statement_timeout,
// lock_timeout, set from the engine's retry deadline).
inline constexpr std::string_view kQueryCanceled = "57014";
inline constexpr std::string_view kLockNotAvailable = "55P03";

// The SQLSTATE of a failed result ("" when there is none, e.g. the connection broke).
std::string SqlState(const PGresult* r);

// Rewrites the `?` placeholders of SQLite-dialect SQL as PostgreSQL's `$1`, `$2`, ... in order,
// leaving `?` inside '...' string literals, "..." identifiers and -- comments alone. Sets
// `count` to the number of placeholders.
std::string TranslatePlaceholders(std::string_view sql, int& count);

// Decodes a bytea value in PostgreSQL's text output (hex format, "\x0a1b...") to its bytes.
// Returns false if the text is not in that format.
bool DecodeByteaHex(std::string_view text, std::string& out);

// The connection string `conninfo` (URL or keywords) with its database replaced by `dbname`, as
// a keyword string. Returns "" if `conninfo` does not parse.
std::string WithDatabase(const std::string& conninfo, const std::string& dbname);

}  // namespace fp::db::postgres
