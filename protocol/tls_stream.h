#pragma once
// TLS over a KJ stream, with OpenSSL working on memory buffers: records are
// encrypted into memory and go to the socket in large writes, and the
// socket is read in large reads. KJ's own TLS stream (libkj-tls 0.9) moves
// at most 8 KiB per event-loop turn through a ring buffer, which held TLS
// transfers near 0.6 GB/s on hosts where plain TCP ran at 2.5-3.5 GB/s.
//
// The TLS configuration (certificates, trust store, verify mode, protocol
// versions, ciphers) stays in a kj::TlsContext; this only replaces the
// connection it would wrap a stream in, with the same checks: a client
// verifies the server's certificate against the context's trust store and
// the host it dialled (a DNS name, or an IP address against IP SANs); a
// server requests and verifies client certificates as the context says.
//
// Threads: one event loop, as every KJ stream.

#include <kj/async-io.h>
#include <kj/compat/tls.h>
#include <openssl/ssl.h>

namespace tensord::protocol {

// The OpenSSL context inside `context` (KJ keeps it private).
SSL_CTX* sslContext(kj::TlsContext& context);

class TlsStream final : public kj::AsyncIoStream {
 public:
  // The client side of a handshake on `inner`. Fails with "TLS peer's
  // certificate is not trusted; reason = ..." when the server's certificate
  // does not verify or is not valid for `host`.
  static kj::Promise<kj::Own<TlsStream>> connect(kj::TlsContext& context, kj::Own<kj::AsyncIoStream> inner,
                                                 kj::StringPtr host);
  // The server side of a handshake on `inner`.
  static kj::Promise<kj::Own<TlsStream>> accept(kj::TlsContext& context, kj::Own<kj::AsyncIoStream> inner);

  ~TlsStream() noexcept(false);

  // The peer's certificate (verified by the handshake), or nullptr when it
  // sent none. Owned by the stream.
  X509* peerCertificate() const;

  kj::Promise<size_t> tryRead(void* buffer, size_t minBytes, size_t maxBytes) override;
  kj::Promise<void> write(const void* buffer, size_t size) override;
  kj::Promise<void> write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) override;
  kj::Promise<void> whenWriteDisconnected() override;
  void shutdownWrite() override;
  void abortRead() override;
  void getsockopt(int level, int option, void* value, kj::uint* length) override;
  void setsockopt(int level, int option, const void* value, kj::uint length) override;
  void getsockname(struct sockaddr* addr, kj::uint* length) override;
  void getpeername(struct sockaddr* addr, kj::uint* length) override;
  kj::Maybe<int> getFd() const override;

  // Public for kj::heap; use connect() or accept().
  TlsStream(SSL_CTX* ctx, kj::Own<kj::AsyncIoStream> inner);

 private:
  kj::Promise<void> handshake();
  kj::Promise<size_t> readLoop(kj::byte* buffer, size_t minBytes, size_t maxBytes, size_t done);
  kj::Promise<void> writeLoop(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces, size_t piece, size_t offset);
  // Reads more of the socket into OpenSSL; false at the end of the stream.
  kj::Promise<bool> receive();
  // Moves what OpenSSL wrote for the network onto the socket, after what
  // went before; resolves once the socket took it. `answers`: written by
  // reading (answers to the peer's key updates), counted in answerBytes_.
  kj::Promise<void> send(bool answers = false);
  // Sends what reading produced; an exception when the peer lets too much
  // of it pile up.
  kj::Maybe<kj::Exception> answer();

  kj::Own<kj::AsyncIoStream> inner_;
  SSL* ssl_ = nullptr;
  BIO* fromNetwork_ = nullptr;  // owned by ssl_
  BIO* toNetwork_ = nullptr;    // owned by ssl_
  X509* peer_ = nullptr;
  kj::String host_;  // an IP address host, for the verify callback
  kj::Array<kj::byte> readBuffer_;
  bool readEnded_ = false;
  kj::Maybe<kj::Exception> readError_;  // a read's failure, reported by the next read
  size_t answerBytes_ = 0;              // see send()
  bool writeShut_ = false;
  kj::Promise<void> sending_ = kj::READY_NOW;  // the socket writes queued so far, in order
  kj::Maybe<kj::Promise<void>> shutdownTask_;
};

}  // namespace tensord::protocol
