// Allocation of addresses and SNAT port blocks from a pool's free space.
//
// Free addresses of each range are kept as maximal spans (ip_free_span). The lowest free
// address of a pool is the first span in (pool_id, first_address) order, an explicit address
// is found with one probe for the span starting at or below it, and a released address merges
// with its neighbours by two probes on the span ends. None of these costs depends on how many
// addresses are allocated (product.md difference 12). SNAT addresses keep a bitmask of their
// four port blocks (snat_address); an address with any SNAT block in use is not wholly free, so
// an explicit request for it is refused (product.md difference 3). On PostgreSQL each
// operation is one statement calling a PL/pgSQL function of migration 8 (schema_postgres.cc)
// that does the same.

#include "db/ip_allocation.h"

#include <fmt/format.h>

namespace fp::db {

namespace {

constexpr int kSnatBlockSize = 16384;

Error NoAddressesAvailable() {
  return Error::InsufficientCapacity("No external IP addresses available");
}

Error AddressNotAvailable() {
  return Error::InvalidRequest("Requested external IP address not available");
}

Error SnatBlockNotRecorded(const AllocatedAddress& a) {
  return Error::Internal(
      fmt::format("SNAT block {}:{} released but not recorded", a.ip.ToString(), a.first_port));
}

// Removes `ip` from the span [first, last] of `range_id`, keeping the remainders.
Status TakeFromSpan(Tx& tx, const Uuid& range_id, const Uuid& pool_id, const IpAddr& first,
                    const IpAddr& last, const IpAddr& ip) {
  FP_TRY(tx.Exec("DELETE FROM ip_free_span WHERE range_id = ? AND first_address = ?", range_id,
                 first));
  if (first < ip) {
    FP_TRY(
        tx.Exec("INSERT INTO ip_free_span (range_id, pool_id, first_address, last_address) "
                "VALUES (?, ?, ?, ?)",
                range_id, pool_id, first, ip.Prev()));
  }
  if (ip < last) {
    FP_TRY(
        tx.Exec("INSERT INTO ip_free_span (range_id, pool_id, first_address, last_address) "
                "VALUES (?, ?, ?, ?)",
                range_id, pool_id, ip.Next(), last));
  }
  return Ok();
}

// Returns the wholly free address `ip` to its range, merging with adjacent spans.
Status ReturnToSpans(Tx& tx, const Uuid& range_id, const Uuid& pool_id, const IpAddr& ip) {
  IpAddr first = ip;
  IpAddr last = ip;
  if (ip.value() > 0) {
    auto left = FP_TRY(tx.QueryRow(
        "SELECT first_address FROM ip_free_span WHERE range_id = ? AND last_address = ?", range_id,
        ip.Prev()));
    if (left) {
      first = FP_TRY(IpColumn(*left, 0));
      FP_TRY(tx.Exec("DELETE FROM ip_free_span WHERE range_id = ? AND first_address = ?", range_id,
                     first));
    }
  }
  if (ip.value() < ip.max_value()) {
    auto right = FP_TRY(tx.QueryRow(
        "SELECT last_address FROM ip_free_span WHERE range_id = ? AND first_address = ?", range_id,
        ip.Next()));
    if (right) {
      last = FP_TRY(IpColumn(*right, 0));
      FP_TRY(tx.Exec("DELETE FROM ip_free_span WHERE range_id = ? AND first_address = ?", range_id,
                     ip.Next()));
    }
  }
  FP_TRY(
      tx.Exec("INSERT INTO ip_free_span (range_id, pool_id, first_address, last_address) "
              "VALUES (?, ?, ?, ?)",
              range_id, pool_id, first, last));
  return Ok();
}

// PostgreSQL: each operation below is one statement, a function of PostgreSQL's migration 8
// (db/schema_postgres.cc) doing what the SQLite path's statements do, so that it costs one
// round trip to the server instead of one per statement (issue 12). SQLite runs in the
// process, where statements cost no round trip, and keeps the statements.

// The row (outcome, got_range, got_ip, got_first_port, got_last_port) of an fp_allocate_...
// function as today's results and errors.
Result<AllocatedAddress> AllocationOutcome(const std::optional<Row>& row) {
  if (!row) return Fail(Error::Internal("address allocation returned no row"));
  const std::string& outcome = row->Text(0);
  if (outcome == "exhausted") return Fail(NoAddressesAvailable());
  if (outcome == "unavailable") return Fail(AddressNotAvailable());
  if (outcome != "ok") {
    return Fail(Error::Internal(fmt::format("address allocation returned '{}'", outcome)));
  }
  return AllocatedAddress{FP_TRY(UuidColumn(*row, 1)), FP_TRY(IpColumn(*row, 2)),
                          static_cast<int>(row->Int(3)), static_cast<int>(row->Int(4))};
}

Result<AllocatedAddress> AllocateLowestPostgres(Tx& tx, const Uuid& pool_id) {
  return AllocationOutcome(FP_TRY(tx.QueryRow("SELECT * FROM fp_allocate_lowest(?)", pool_id)));
}

Result<AllocatedAddress> AllocateExplicitPostgres(Tx& tx, const Uuid& pool_id, const IpAddr& ip) {
  return AllocationOutcome(
      FP_TRY(tx.QueryRow("SELECT * FROM fp_allocate_explicit(?, ?)", pool_id, ip)));
}

Result<AllocatedAddress> AllocateSnatPostgres(Tx& tx, const Uuid& pool_id) {
  return AllocationOutcome(FP_TRY(tx.QueryRow("SELECT * FROM fp_allocate_snat(?)", pool_id)));
}

// fp_release_address's outcome for releasing `a` as today's Status.
Status ReleaseOutcome(std::string_view outcome, const AllocatedAddress& a) {
  if (outcome == "ok") return Ok();
  if (outcome == "snat_unrecorded") return Fail(SnatBlockNotRecorded(a));
  return Fail(Error::Internal(fmt::format("address release returned '{}'", outcome)));
}

Status ReleasePostgres(Tx& tx, const Uuid& pool_id, const AllocatedAddress& a) {
  auto row = FP_TRY(tx.QueryRow("SELECT fp_release_address(?, ?, ?, ?, ?)", pool_id, a.range_id,
                                a.ip, a.first_port, a.last_port));
  if (!row) return Fail(Error::Internal("address release returned no row"));
  return ReleaseOutcome(row->Text(0), a);
}

}  // namespace

Result<AllocatedAddress> AllocateLowestAddress(Tx& tx, const Uuid& pool_id) {
  // One statement, one round trip to the server, on PostgreSQL (see above).
  if (tx.postgres()) return AllocateLowestPostgres(tx, pool_id);
  auto span = FP_TRY(tx.QueryRow(
      "SELECT range_id, first_address, last_address FROM ip_free_span WHERE pool_id = ? "
      "ORDER BY first_address LIMIT 1",
      pool_id));
  if (!span) return Fail(NoAddressesAvailable());
  Uuid range_id = FP_TRY(UuidColumn(*span, 0));
  IpAddr first = FP_TRY(IpColumn(*span, 1));
  IpAddr last = FP_TRY(IpColumn(*span, 2));
  FP_CHECK_OK(TakeFromSpan(tx, range_id, pool_id, first, last, first));
  return AllocatedAddress{range_id, first, 0, 65535};
}

Result<AllocatedAddress> AllocateExplicitAddress(Tx& tx, const Uuid& pool_id, const IpAddr& ip) {
  // One statement, one round trip to the server, on PostgreSQL (see above).
  if (tx.postgres()) return AllocateExplicitPostgres(tx, pool_id, ip);
  auto span = FP_TRY(tx.QueryRow(
      "SELECT range_id, first_address, last_address FROM ip_free_span WHERE pool_id = ? AND "
      "first_address <= ? ORDER BY first_address DESC LIMIT 1",
      pool_id, ip));
  if (!span) return Fail(AddressNotAvailable());
  IpAddr first = FP_TRY(IpColumn(*span, 1));
  IpAddr last = FP_TRY(IpColumn(*span, 2));
  if (first.version() != ip.version() || last < ip) return Fail(AddressNotAvailable());
  Uuid range_id = FP_TRY(UuidColumn(*span, 0));
  FP_CHECK_OK(TakeFromSpan(tx, range_id, pool_id, first, last, ip));
  return AllocatedAddress{range_id, ip, 0, 65535};
}

Result<AllocatedAddress> AllocateSnatBlock(Tx& tx, const Uuid& pool_id) {
  // One statement, one round trip to the server, on PostgreSQL (see above).
  if (tx.postgres()) return AllocateSnatPostgres(tx, pool_id);
  auto partial = FP_TRY(tx.QueryRow(
      "SELECT ip, range_id, used_blocks FROM snat_address WHERE pool_id = ? AND used_blocks != 15 "
      "ORDER BY ip LIMIT 1",
      pool_id));
  auto span = FP_TRY(tx.QueryRow(
      "SELECT range_id, first_address, last_address FROM ip_free_span WHERE pool_id = ? "
      "ORDER BY first_address LIMIT 1",
      pool_id));
  std::optional<IpAddr> partial_ip;
  if (partial) partial_ip = FP_TRY(IpColumn(*partial, 0));
  std::optional<IpAddr> free_ip;
  if (span) free_ip = FP_TRY(IpColumn(*span, 1));

  // The lowest (address, first port) wins: block 0 of a wholly free address beats any block of
  // a higher partially used address.
  if (partial_ip && (!free_ip || *partial_ip < *free_ip)) {
    int64_t used = partial->Int(2);
    int block = 0;
    while (used & (int64_t{1} << block)) ++block;
    FP_TRY(tx.Exec("UPDATE snat_address SET used_blocks = ? WHERE ip = ?",
                   used | (int64_t{1} << block), *partial_ip));
    return AllocatedAddress{FP_TRY(UuidColumn(*partial, 1)), *partial_ip, block * kSnatBlockSize,
                            (block + 1) * kSnatBlockSize - 1};
  }
  if (!free_ip) return Fail(NoAddressesAvailable());
  Uuid range_id = FP_TRY(UuidColumn(*span, 0));
  IpAddr last = FP_TRY(IpColumn(*span, 2));
  FP_CHECK_OK(TakeFromSpan(tx, range_id, pool_id, *free_ip, last, *free_ip));
  FP_TRY(
      tx.Exec("INSERT INTO snat_address (ip, pool_id, range_id, used_blocks) VALUES (?, ?, ?, 1)",
              *free_ip, pool_id, range_id));
  return AllocatedAddress{range_id, *free_ip, 0, kSnatBlockSize - 1};
}

Error NoneFreeIn(Tx& tx, const Error& error, const Uuid& pool_id, std::string_view purpose) {
  if (error.kind() != ErrorKind::kInsufficientCapacity) return error;
  auto row = tx.QueryRow("SELECT name FROM ip_pool WHERE id = ?", pool_id);
  std::string pool = row && *row ? (*row)->Text(0) : pool_id.ToString();
  return Error::InsufficientCapacity(
      fmt::format("No external IP addresses available in pool \"{}\" {}", pool, purpose));
}

Status ReleaseAddress(Tx& tx, const Uuid& pool_id, const AllocatedAddress& a) {
  // One statement, one round trip to the server, on PostgreSQL (see above).
  if (tx.postgres()) return ReleasePostgres(tx, pool_id, a);
  bool whole = a.first_port == 0 && a.last_port == 65535;
  if (!whole) {
    auto row = FP_TRY(tx.QueryRow("SELECT used_blocks FROM snat_address WHERE ip = ?", a.ip));
    if (!row) {
      return Fail(SnatBlockNotRecorded(a));
    }
    int64_t used = row->Int(0) & ~(int64_t{1} << (a.first_port / kSnatBlockSize));
    if (used != 0) {
      FP_TRY(tx.Exec("UPDATE snat_address SET used_blocks = ? WHERE ip = ?", used, a.ip));
      return Ok();
    }
    FP_TRY(tx.Exec("DELETE FROM snat_address WHERE ip = ?", a.ip));
  }
  return ReturnToSpans(tx, a.range_id, pool_id, a.ip);
}

}  // namespace fp::db
