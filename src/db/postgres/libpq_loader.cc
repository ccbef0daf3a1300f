// libpq, loaded when the process first needs it rather than at every start of the binary.
//
// The binary is the server, the agents and the command-line client in one; only a server given
// a PostgreSQL URL speaks to PostgreSQL, yet linking libpq made every start load it and the
// twenty libraries it pulls in (Kerberos, LDAP, SASL, ...): about 10 ms of CPU per start on a
// 2-core virtual machine, where the page faults of mapping and relocating them cost 20-40 us
// each (a program linked against every library of the binary took 21 ms to start and exit,
// 10 ms without libpq, libcurl and the netfilter libraries; 2026-12-06). So libpq is not
// linked: the functions of it that the engine calls are defined here, each forwarding to the
// function of the same name in libpq.so.5, opened with dlopen on the first call. The
// declarations come from libpq-fe.h, so a signature written here that differs from libpq's
// does not compile.
//
// LoadLibpq() (libpq.h) reports a library that cannot be loaded as an error the caller can
// return; PgConnection::Open asks it first, so a server given a PostgreSQL URL on a machine
// without libpq5 says so at its start. A forwarding function called without the library
// (which the engine never does before a connection is open) aborts with the same message.

#include <libpq-fe.h>

#include <string>

#include "common/loaded_library.h"
#include "db/postgres/libpq.h"

// Each function the engine calls: its return type, name, parameters and the arguments that
// forward them.
#define FP_LIBPQ_FUNCTIONS(X)                                                                      \
  X(int, PQcancel, (PGcancel * cancel, char* errbuf, int errbufsize),                              \
    (cancel, errbuf, errbufsize))                                                                  \
  X(void, PQclear, (PGresult * res), (res))                                                        \
  X(char*, PQcmdTuples, (PGresult * res), (res))                                                   \
  X(PGconn*, PQconnectdbParams,                                                                    \
    (const char* const* keywords, const char* const* values, int expand_dbname),                   \
    (keywords, values, expand_dbname))                                                             \
  X(PQconninfoOption*, PQconninfo, (PGconn * conn), (conn))                                        \
  X(void, PQconninfoFree, (PQconninfoOption * options), (options))                                 \
  X(PQconninfoOption*, PQconninfoParse, (const char* conninfo, char** errmsg), (conninfo, errmsg)) \
  X(int, PQenterPipelineMode, (PGconn * conn), (conn))                                             \
  X(char*, PQerrorMessage, (const PGconn* conn), (conn))                                           \
  X(PGresult*, PQexec, (PGconn * conn, const char* query), (conn, query))                          \
  X(PGresult*, PQexecPrepared,                                                                     \
    (PGconn * conn, const char* name, int n, const char* const* values, const int* lengths,        \
     const int* formats, int result_format),                                                       \
    (conn, name, n, values, lengths, formats, result_format))                                      \
  X(int, PQexitPipelineMode, (PGconn * conn), (conn))                                              \
  X(void, PQfinish, (PGconn * conn), (conn))                                                       \
  X(void, PQfreeCancel, (PGcancel * cancel), (cancel))                                             \
  X(void, PQfreemem, (void* ptr), (ptr))                                                           \
  X(Oid, PQftype, (const PGresult* res, int field), (res, field))                                  \
  X(PGcancel*, PQgetCancel, (PGconn * conn), (conn))                                               \
  X(PGresult*, PQgetResult, (PGconn * conn), (conn))                                               \
  X(int, PQgetisnull, (const PGresult* res, int row, int field), (res, row, field))                \
  X(int, PQgetlength, (const PGresult* res, int row, int field), (res, row, field))                \
  X(char*, PQgetvalue, (const PGresult* res, int row, int field), (res, row, field))               \
  X(int, PQnfields, (const PGresult* res), (res))                                                  \
  X(int, PQntuples, (const PGresult* res), (res))                                                  \
  X(int, PQpipelineSync, (PGconn * conn), (conn))                                                  \
  X(char*, PQresultErrorField, (const PGresult* res, int code), (res, code))                       \
  X(char*, PQresultErrorMessage, (const PGresult* res), (res))                                     \
  X(ExecStatusType, PQresultStatus, (const PGresult* res), (res))                                  \
  X(int, PQsendPrepare,                                                                            \
    (PGconn * conn, const char* name, const char* query, int n, const Oid* types),                 \
    (conn, name, query, n, types))                                                                 \
  X(int, PQsendQueryParams,                                                                        \
    (PGconn * conn, const char* command, int n, const Oid* types, const char* const* values,       \
     const int* lengths, const int* formats, int result_format),                                   \
    (conn, command, n, types, values, lengths, formats, result_format))                            \
  X(int, PQsendQueryPrepared,                                                                      \
    (PGconn * conn, const char* name, int n, const char* const* values, const int* lengths,        \
     const int* formats, int result_format),                                                       \
    (conn, name, n, values, lengths, formats, result_format))                                      \
  X(PQnoticeProcessor, PQsetNoticeProcessor, (PGconn * conn, PQnoticeProcessor proc, void* arg),   \
    (conn, proc, arg))                                                                             \
  X(int, PQsocket, (const PGconn* conn), (conn))                                                   \
  X(ConnStatusType, PQstatus, (const PGconn* conn), (conn))                                        \
  X(PGTransactionStatusType, PQtransactionStatus, (const PGconn* conn), (conn))

namespace fp::db::postgres {
namespace {

struct LibpqFunctions {
  LoadedLibrary library{"libpq.so.5", "PostgreSQL's client library, Debian's libpq5"};
  FP_LIBPQ_FUNCTIONS(FP_LOADED_FUNCTION)
};

}  // namespace

Status LoadLibpq() {
  const std::string& error = LoadedOnce<LibpqFunctions>().library.error();
  if (!error.empty()) return Fail(Error::Unavailable(error));
  return Ok();
}

}  // namespace fp::db::postgres

#define FP_LIBPQ_FORWARD(ret, name, params, args) \
  FP_FORWARD_TO_LOADED(fp::db::postgres::LibpqFunctions, ret, name, params, args)
extern "C" {
FP_LIBPQ_FUNCTIONS(FP_LIBPQ_FORWARD)
}
#undef FP_LIBPQ_FORWARD
