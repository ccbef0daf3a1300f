#pragma once

// TLS for the HTTP server: the certificate and key it presents, read from PEM files and read
// again on demand (SIGHUP), and the byte stream its connections are read and written through,
// plain or TLS.

#include <sys/types.h>

#include <memory>
#include <string>

#include "common/error.h"
#include "common/mutex.h"

struct ssl_ctx_st;  // OpenSSL's SSL_CTX
struct ssl_st;      // OpenSSL's SSL

namespace fp::http {

// The server's certificate (a PEM file: the certificate, then any intermediate certificates)
// and its private key (PEM). Only TLS 1.2 and 1.3 are offered, with OpenSSL's default ciphers
// for them. Thread-safe.
class TlsCertificate {
 public:
  // Reads and checks both files (the key must match the certificate). InvalidRequest naming
  // the file and what is wrong with it.
  static Result<std::shared_ptr<TlsCertificate>> Load(std::string cert_file, std::string key_file);

  // Reads both files again; new connections get the new certificate, connections already open
  // keep theirs. On an error nothing changes and the error says why.
  Status Reload();

  // A new server-side TLS session on `fd` (a non-blocking socket), waiting for the client's
  // handshake. Never null (OpenSSL out of memory aborts, as an allocation failure does).
  ssl_st* NewSession(int fd) const;

  const std::string& cert_file() const { return cert_file_; }
  const std::string& key_file() const { return key_file_; }
  // The certificate's subject and expiry, for the log (e.g. after a reload).
  std::string Describe() const;

 private:
  TlsCertificate(std::string cert_file, std::string key_file)
      : cert_file_(std::move(cert_file)), key_file_(std::move(key_file)) {}

  const std::string cert_file_;
  const std::string key_file_;
  mutable Mutex mu_;
  std::shared_ptr<ssl_ctx_st> context_ FP_GUARDED_BY(mu_);  // sessions hold their own reference
  std::string description_ FP_GUARDED_BY(mu_);
};

namespace socket_io {

// A connection's byte stream: a plain socket, or TLS over it. The socket is non-blocking.
struct Stream {
  int fd = -1;
  ssl_st* tls = nullptr;  // owned by the connection, not by the Stream
};

// Reads what is there without waiting. > 0: bytes read; 0: the peer closed, reset, or broke
// the TLS protocol; -1: nothing yet, and `wait` says what to wait for (POLLIN, or POLLOUT
// while a TLS handshake must send).
ssize_t RecvSome(Stream s, void* data, size_t size, short& wait);

// Writes what the socket takes now. > 0: bytes written; -1 with errno EAGAIN: nothing could
// be written yet, `wait` says what to wait for; -1 with another errno: the connection is gone.
ssize_t SendSome(Stream s, const void* data, size_t size, short& wait);

// True if TLS holds decrypted bytes that RecvSome has not returned yet: the socket may then
// never become readable again for them, so the reader must read before it waits.
bool HasBuffered(Stream s);

// Ends a TLS session: sends close_notify if the handshake finished (without waiting for the
// peer's), and frees it. Does nothing for a plain stream; never closes the socket.
void EndTls(ssl_st*& tls);

}  // namespace socket_io
}  // namespace fp::http
