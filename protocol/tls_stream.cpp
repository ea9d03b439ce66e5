#include "protocol/tls_stream.h"

#include <arpa/inet.h>
#include <kj/debug.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <climits>
#include <string>

namespace tensord::protocol {
namespace {

// KJ keeps a TlsContext's SSL_CTX private; an explicit instantiation may
// name private members.
template <typename Tag, typename Tag::type Member>
struct Expose {
  friend typename Tag::type member(Tag) { return Member; }
};
struct ContextCtx {
  using type = void* kj::TlsContext::*;
  friend type member(ContextCtx);
};
template struct Expose<ContextCtx, &kj::TlsContext::ctx>;

// Socket reads land in a buffer that starts small and doubles, up to the
// largest, while reads fill it: a connection of small calls keeps a small one.
constexpr size_t kFirstReadBytes = 16 * 1024;
constexpr size_t kReadBytes = 256 * 1024;
// Records that reading produced (answers to the peer's key updates) and the
// socket has not taken yet. A peer that keeps asking without reading the
// answers would otherwise grow them without bound.
constexpr size_t kMaxAnswerBytes = 64 * 1024;
// A write is encrypted this much at a time, each slice handed to the socket
// before the next is encrypted: large socket writes, bounded memory.
constexpr size_t kWriteSlice = 256 * 1024;

// OpenSSL's queued errors as KJ reports them ("OpenSSL error; message = ..."),
// so that callers parse both alike.
kj::Exception opensslError() {
  std::string lines;
  while (unsigned long code = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(code, text, sizeof text);
    if (!lines.empty()) lines += "\n";
    lines += text;
  }
  if (lines.empty()) lines = "no error queued";
  return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                       kj::str("OpenSSL error; message = ", lines.c_str()));
}

// An SSL_read / SSL_write / SSL_do_handshake result other than progress or
// "needs more input" as an exception.
kj::Exception failure(SSL* ssl, int result) {
  const int error = SSL_get_error(ssl, result);
  if (error == SSL_ERROR_SYSCALL || error == SSL_ERROR_ZERO_RETURN) {
    ERR_clear_error();
    return KJ_EXCEPTION(DISCONNECTED, "the TLS connection ended");
  }
  if (error == SSL_ERROR_WANT_WRITE || error == SSL_ERROR_WANT_READ) {
    ERR_clear_error();
    return KJ_EXCEPTION(FAILED, "TLS renegotiation is not supported");
  }
  return opensslError();
}

bool isIpLiteral(kj::StringPtr host) {
  unsigned char address[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.cStr(), address) == 1 || inet_pton(AF_INET6, host.cStr(), address) == 1;
}

// For a host given as an IP address: a certificate whose IP address SANs do
// not list it still matches where its DNS names (or, without those, its CN)
// spell the address, as KJ's stream accepted.
int verifyIpHost(int ok, X509_STORE_CTX* store) {
  if (ok != 0 || X509_STORE_CTX_get_error(store) != X509_V_ERR_IP_ADDRESS_MISMATCH) return ok;
  auto* ssl = static_cast<SSL*>(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
  const char* host = ssl == nullptr ? nullptr : static_cast<const char*>(SSL_get_app_data(ssl));
  X509* leaf = X509_STORE_CTX_get0_cert(store);
  if (host != nullptr && leaf != nullptr && X509_check_host(leaf, host, 0, 0, nullptr) == 1) {
    X509_STORE_CTX_set_error(store, X509_V_OK);
    return 1;
  }
  return ok;
}

}  // namespace

SSL_CTX* sslContext(kj::TlsContext& context) { return static_cast<SSL_CTX*>(context.*member(ContextCtx{})); }

TlsStream::TlsStream(SSL_CTX* ctx, kj::Own<kj::AsyncIoStream> inner)
    : inner_(kj::mv(inner)), readBuffer_(kj::heapArray<kj::byte>(kFirstReadBytes)) {
  ssl_ = SSL_new(ctx);
  fromNetwork_ = BIO_new(BIO_s_mem());
  toNetwork_ = BIO_new(BIO_s_mem());
  if (ssl_ == nullptr || fromNetwork_ == nullptr || toNetwork_ == nullptr) {
    BIO_free(fromNetwork_);
    BIO_free(toNetwork_);
    SSL_free(ssl_);
    ssl_ = nullptr;
    kj::throwFatalException(opensslError());
  }
  // An empty input buffer means "wait for more", not the end of the stream.
  BIO_set_mem_eof_return(fromNetwork_, -1);
  SSL_set_bio(ssl_, fromNetwork_, toNetwork_);
  // TLS 1.2 renegotiation is refused with an alert: nothing here asks for it,
  // and a new certificate mid-connection would go unchecked.
  SSL_set_options(ssl_, SSL_OP_NO_RENEGOTIATION);
}

TlsStream::~TlsStream() noexcept(false) {
  X509_free(peer_);
  SSL_free(ssl_);
}

kj::Promise<kj::Own<TlsStream>> TlsStream::connect(kj::TlsContext& context, kj::Own<kj::AsyncIoStream> inner,
                                                   kj::StringPtr host) {
  auto stream = kj::heap<TlsStream>(sslContext(context), kj::mv(inner));
  SSL* ssl = stream->ssl_;
  SSL_set_connect_state(ssl);
  X509_VERIFY_PARAM* verify = SSL_get0_param(ssl);
  // An IP address is checked against the certificate's IP address SANs, a
  // name against its DNS names (and sent as SNI).
  const bool named = !isIpLiteral(host);
  if (named ? SSL_set_tlsext_host_name(ssl, host.cStr()) != 1 ||
                  X509_VERIFY_PARAM_set1_host(verify, host.cStr(), host.size()) != 1
            : X509_VERIFY_PARAM_set1_ip_asc(verify, host.cStr()) != 1) {
    return opensslError();
  }
  if (!named) {
    stream->host_ = kj::heapString(host);
    SSL_set_app_data(ssl, stream->host_.cStr());
    SSL_set_verify(ssl, SSL_get_verify_mode(ssl), verifyIpHost);
  }
  TlsStream& ref = *stream;
  return ref.handshake().then([stream = kj::mv(stream)]() mutable -> kj::Own<TlsStream> {
    stream->peer_ = SSL_get1_peer_certificate(stream->ssl_);
    KJ_REQUIRE(stream->peer_ != nullptr, "TLS peer provided no certificate");
    const long result = SSL_get_verify_result(stream->ssl_);
    if (result != X509_V_OK) {
      kj::throwFatalException(KJ_EXCEPTION(
          FAILED, kj::str("TLS peer's certificate is not trusted; reason = ", X509_verify_cert_error_string(result))));
    }
    return kj::mv(stream);
  });
}

kj::Promise<kj::Own<TlsStream>> TlsStream::accept(kj::TlsContext& context, kj::Own<kj::AsyncIoStream> inner) {
  auto stream = kj::heap<TlsStream>(sslContext(context), kj::mv(inner));
  SSL_set_accept_state(stream->ssl_);
  SSL_set_options(stream->ssl_, SSL_OP_CIPHER_SERVER_PREFERENCE);
  TlsStream& ref = *stream;
  return ref.handshake().then([stream = kj::mv(stream)]() mutable {
    // Verified by the handshake where the context asks for it.
    stream->peer_ = SSL_get1_peer_certificate(stream->ssl_);
    return kj::mv(stream);
  });
}

X509* TlsStream::peerCertificate() const { return peer_; }

kj::Promise<void> TlsStream::handshake() {
  ERR_clear_error();
  const int result = SSL_do_handshake(ssl_);
  if (result == 1) return send();
  if (SSL_get_error(ssl_, result) == SSL_ERROR_WANT_READ) {
    return send().then([this] { return receive(); }).then([this](bool more) -> kj::Promise<void> {
      if (!more) return KJ_EXCEPTION(DISCONNECTED, "the peer closed the connection during the TLS handshake");
      return handshake();
    });
  }
  // Send the alert OpenSSL wrote (the peer learns why), then fail.
  return send().catch_([](kj::Exception&&) {}).then([e = failure(ssl_, result)]() mutable -> kj::Promise<void> {
    return kj::mv(e);
  });
}

kj::Promise<bool> TlsStream::receive() {
  return inner_->tryRead(readBuffer_.begin(), 1, readBuffer_.size()).then([this](size_t n) {
    if (n == 0) return false;
    BIO_write(fromNetwork_, readBuffer_.begin(), int(n));
    if (n == readBuffer_.size() && n < kReadBytes) readBuffer_ = kj::heapArray<kj::byte>(2 * n);
    return true;
  });
}

kj::Promise<void> TlsStream::send(bool answers) {
  kj::Array<kj::byte> bytes = nullptr;
  if (const size_t pending = BIO_ctrl_pending(toNetwork_); pending > 0) {
    bytes = kj::heapArray<kj::byte>(pending);
    BIO_read(toNetwork_, bytes.begin(), int(pending));
  }
  const size_t counted = answers ? bytes.size() : 0;
  answerBytes_ += counted;
  auto written = sending_
                     .then([this, bytes = kj::mv(bytes), counted]() mutable -> kj::Promise<void> {
                       if (bytes.size() == 0) return kj::READY_NOW;
                       const kj::byte* begin = bytes.begin();
                       const size_t size = bytes.size();
                       return inner_->write(begin, size).attach(kj::mv(bytes)).then([this, counted]() {
                         answerBytes_ -= counted;
                       });
                     })
                     .fork();
  // Runs whether or not anyone waits for it; a failure reaches every later send.
  sending_ = written.addBranch().eagerlyEvaluate(nullptr);
  return written.addBranch();
}

kj::Promise<size_t> TlsStream::tryRead(void* buffer, size_t minBytes, size_t maxBytes) {
  KJ_IF_MAYBE (error, readError_) {
    return kj::cp(*error);
  }
  return readLoop(static_cast<kj::byte*>(buffer), minBytes, maxBytes, 0);
}

kj::Promise<size_t> TlsStream::readLoop(kj::byte* buffer, size_t minBytes, size_t maxBytes, size_t done) {
  while (done < maxBytes && !readEnded_) {
    ERR_clear_error();
    const int n = SSL_read(ssl_, buffer + done, int(std::min<size_t>(maxBytes - done, INT_MAX)));
    if (n > 0) {
      done += size_t(n);
      continue;
    }
    const int error = SSL_get_error(ssl_, n);
    if (error == SSL_ERROR_ZERO_RETURN) {  // the peer's close_notify
      readEnded_ = true;
      break;
    }
    if (error != SSL_ERROR_WANT_READ) {
      // The bytes decrypted before the failure are the caller's; the failure
      // comes with the next read.
      readError_ = failure(ssl_, n);
      if (done >= minBytes && done > 0) return done;
      return kj::cp(KJ_ASSERT_NONNULL(readError_));
    }
    // Everything received so far is decrypted; reading may have produced
    // records to send (answers to key updates).
    KJ_IF_MAYBE (e, answer()) {
      return kj::mv(*e);
    }
    if (done >= minBytes) return done;
    return receive().then([this, buffer, minBytes, maxBytes, done](bool more) -> kj::Promise<size_t> {
      if (!more) {
        readEnded_ = true;
        return done;
      }
      return readLoop(buffer, minBytes, maxBytes, done);
    });
  }
  KJ_IF_MAYBE (e, answer()) {
    return kj::mv(*e);
  }
  return done;
}

kj::Maybe<kj::Exception> TlsStream::answer() {
  if (BIO_ctrl_pending(toNetwork_) == 0) return nullptr;
  // They go out with the send queue whether or not anyone waits.
  (void)send(true);
  if (answerBytes_ > kMaxAnswerBytes) {
    kj::Exception e = KJ_EXCEPTION(FAILED, "the TLS peer keeps sending key updates without reading the answers");
    readError_ = kj::cp(e);
    return kj::mv(e);
  }
  return nullptr;
}

kj::Promise<void> TlsStream::write(const void* buffer, size_t size) {
  auto pieces = kj::heapArray<kj::ArrayPtr<const kj::byte>>(1);
  pieces[0] = kj::arrayPtr(static_cast<const kj::byte*>(buffer), size);
  auto view = pieces.asPtr();
  return writeLoop(view, 0, 0).attach(kj::mv(pieces));
}

kj::Promise<void> TlsStream::write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) {
  return writeLoop(pieces, 0, 0);
}

kj::Promise<void> TlsStream::writeLoop(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces, size_t piece,
                                       size_t offset) {
  KJ_REQUIRE(!writeShut_, "write after shutdownWrite()");
  size_t encrypted = 0;
  while (piece < pieces.size()) {
    const auto& current = pieces[piece];
    if (offset >= current.size()) {
      ++piece;
      offset = 0;
      continue;
    }
    const size_t n = std::min(current.size() - offset, kWriteSlice - encrypted);
    ERR_clear_error();
    const int result = SSL_write(ssl_, current.begin() + offset, int(n));
    if (result <= 0) return failure(ssl_, result);
    offset += size_t(result);
    encrypted += size_t(result);
    if (encrypted >= kWriteSlice) {
      return send().then([this, pieces, piece, offset]() { return writeLoop(pieces, piece, offset); });
    }
  }
  return send();
}

kj::Promise<void> TlsStream::whenWriteDisconnected() { return inner_->whenWriteDisconnected(); }

void TlsStream::shutdownWrite() {
  KJ_REQUIRE(!writeShut_, "shutdownWrite() called twice");
  writeShut_ = true;
  ERR_clear_error();
  SSL_shutdown(ssl_);  // queues our close_notify
  ERR_clear_error();
  shutdownTask_ = send().then([this]() { inner_->shutdownWrite(); }).eagerlyEvaluate([](kj::Exception&&) {
    // The peer is gone already: nothing is left to tell it.
  });
}

void TlsStream::abortRead() { inner_->abortRead(); }

void TlsStream::getsockopt(int level, int option, void* value, kj::uint* length) {
  inner_->getsockopt(level, option, value, length);
}

void TlsStream::setsockopt(int level, int option, const void* value, kj::uint length) {
  inner_->setsockopt(level, option, value, length);
}

void TlsStream::getsockname(struct sockaddr* addr, kj::uint* length) { inner_->getsockname(addr, length); }

void TlsStream::getpeername(struct sockaddr* addr, kj::uint* length) { inner_->getpeername(addr, length); }

kj::Maybe<int> TlsStream::getFd() const { return inner_->getFd(); }

}  // namespace tensord::protocol
