#include "http/tls.h"

#include <fmt/format.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509err.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>

namespace fp::http {

namespace {

// The reason of the first error OpenSSL queued on this thread ("no start line": the cause,
// where the later ones say where it surfaced), and clears the queue.
std::string TakeSslError() {
  unsigned long code = ERR_peek_error();
  std::string reason;
  if (const char* text = code != 0 ? ERR_reason_error_string(code) : nullptr; text != nullptr) {
    reason = text;
  } else if (code != 0) {
    reason = fmt::format("OpenSSL error {:#x}", code);
  } else {
    reason = "unknown error";
  }
  ERR_clear_error();
  return reason;
}

std::string DescribeCertificate(const X509* certificate) {
  char subject[512] = {};
  X509_NAME_oneline(X509_get_subject_name(certificate), subject, sizeof subject);
  std::string expiry;
  if (BIO* out = BIO_new(BIO_s_mem()); out != nullptr) {
    if (ASN1_TIME_print(out, X509_get0_notAfter(certificate)) == 1) {
      char* text = nullptr;
      long size = BIO_get_mem_data(out, &text);
      if (size > 0) expiry.assign(text, static_cast<size_t>(size));
    }
    BIO_free(out);
  }
  return fmt::format("{} (valid until {})", subject, expiry);
}

struct Loaded {
  std::shared_ptr<ssl_ctx_st> context;
  std::string description;
};

Result<Loaded> LoadContext(const std::string& cert_file, const std::string& key_file) {
  ERR_clear_error();
  std::shared_ptr<SSL_CTX> context(SSL_CTX_new(TLS_server_method()), SSL_CTX_free);
  if (!context) return Fail(Error::Internal("cannot create a TLS context: " + TakeSslError()));
  SSL_CTX* ctx = context.get();
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_options(
      ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_COMPRESSION);
  // Partial writes on a non-blocking socket; idle connections (thousands of them) keep no
  // buffers.
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                            SSL_MODE_RELEASE_BUFFERS);
  // No session resumption: a ticket is one more secret to rotate, and clients of an API keep
  // their connections open instead.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_num_tickets(ctx, 0);
  if (SSL_CTX_use_certificate_chain_file(ctx, cert_file.c_str()) != 1) {
    return Fail(Error::InvalidRequest(
        fmt::format("cannot use the certificate file {}: {} (expected PEM: the certificate, "
                    "then any intermediate certificates)",
                    cert_file, TakeSslError())));
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    if (ERR_GET_REASON(ERR_peek_error()) == X509_R_KEY_VALUES_MISMATCH) {
      ERR_clear_error();
      return Fail(Error::InvalidRequest(fmt::format(
          "the private key in {} does not belong to the certificate in {}", key_file, cert_file)));
    }
    return Fail(Error::InvalidRequest(fmt::format(
        "cannot use the private key file {}: {} (expected an unencrypted PEM private key)",
        key_file, TakeSslError())));
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    ERR_clear_error();
    return Fail(Error::InvalidRequest(fmt::format(
        "the private key in {} does not belong to the certificate in {}", key_file, cert_file)));
  }
  return Loaded{context, DescribeCertificate(SSL_CTX_get0_certificate(ctx))};
}

}  // namespace

Result<std::shared_ptr<TlsCertificate>> TlsCertificate::Load(std::string cert_file,
                                                             std::string key_file) {
  std::shared_ptr<TlsCertificate> certificate(
      new TlsCertificate(std::move(cert_file), std::move(key_file)));
  FP_CHECK_OK(certificate->Reload());
  return certificate;
}

Status TlsCertificate::Reload() {
  Loaded loaded = FP_TRY(LoadContext(cert_file_, key_file_));
  MutexLock lock(mu_);
  context_ = std::move(loaded.context);
  description_ = std::move(loaded.description);
  return Ok();
}

ssl_st* TlsCertificate::NewSession(int fd) const {
  std::shared_ptr<ssl_ctx_st> context;
  {
    MutexLock lock(mu_);
    context = context_;
  }
  SSL* tls = SSL_new(context.get());  // holds its own reference to the context
  if (tls == nullptr) std::abort();
  SSL_set_fd(tls, fd);
  SSL_set_accept_state(tls);
  return tls;
}

std::string TlsCertificate::Describe() const {
  MutexLock lock(mu_);
  return description_;
}

namespace socket_io {

namespace {

// What a TLS call that returned `n` <= 0 means: -1 with `wait` set (and errno EAGAIN) when it
// must be called again once the socket is ready, 0 when the session is over.
ssize_t TlsWouldBlock(ssl_st* tls, int n, short& wait) {
  switch (SSL_get_error(tls, n)) {
    case SSL_ERROR_WANT_READ:
      wait = POLLIN;
      errno = EAGAIN;
      return -1;
    case SSL_ERROR_WANT_WRITE:
      wait = POLLOUT;
      errno = EAGAIN;
      return -1;
    default:
      ERR_clear_error();
      return 0;
  }
}

}  // namespace

ssize_t RecvSome(Stream s, void* data, size_t size, short& wait) {
  if (s.tls != nullptr) {
    ERR_clear_error();
    int n = SSL_read(s.tls, data, static_cast<int>(std::min<size_t>(size, INT_MAX)));
    return n > 0 ? n : TlsWouldBlock(s.tls, n, wait);
  }
  for (;;) {
    ssize_t n = ::recv(s.fd, data, size, MSG_DONTWAIT);
    if (n > 0) return n;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait = POLLIN;
      return -1;
    }
    return 0;
  }
}

ssize_t SendSome(Stream s, const void* data, size_t size, short& wait) {
  if (s.tls != nullptr) {
    ERR_clear_error();
    int n = SSL_write(s.tls, data, static_cast<int>(std::min<size_t>(size, INT_MAX)));
    if (n > 0) return n;
    if (TlsWouldBlock(s.tls, n, wait) < 0) return -1;
    errno = EPIPE;
    return -1;
  }
  for (;;) {
    ssize_t n = ::send(s.fd, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      errno = EAGAIN;
      wait = POLLOUT;
    }
    return -1;
  }
}

bool HasBuffered(Stream s) {
  // Decrypted bytes only: a partial record OpenSSL holds needs more from the socket, so its
  // reader must wait for the socket (without read-ahead no whole record waits unread).
  return s.tls != nullptr && SSL_pending(s.tls) > 0;
}

void EndTls(ssl_st*& tls) {
  if (tls == nullptr) return;
  if (SSL_is_init_finished(tls)) SSL_shutdown(tls);
  ERR_clear_error();
  SSL_free(tls);
  tls = nullptr;
}

}  // namespace socket_io
}  // namespace fp::http
