#pragma once
// The listener's TLS side: the server certificate and key, the client CA and
// the client_auth mode of the config's `tls` object, in a KJ TlsContext
// (OpenSSL 3, TLS 1.2 or later), plus reading the names a verified client
// certificate offers as identity.
//
// Threads: the event-loop thread only.

#include <kj/async-io.h>

#include <memory>
#include <string>
#include <vector>

#include "server/config.h"

namespace tensord::server {

class ServerTls {
 public:
  // Reads the PEM files; throws ConfigError naming the tls.* key at fault.
  explicit ServerTls(const TlsConfig& config);
  ~ServerTls();
  ServerTls(const ServerTls&) = delete;
  ServerTls& operator=(const ServerTls&) = delete;

  // The server side of the handshake. Resolves once it completed (and the
  // client certificate, when one is asked for and sent, verified); the
  // peer identity is then a kj::TlsPeerIdentity.
  kj::Promise<kj::AuthenticatedStream> accept(kj::AuthenticatedStream stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The verified client certificate's subject CN and its DNS and email SANs,
// in that order; empty when `identity` is not TLS or no certificate was sent.
std::vector<std::string> certificateNames(kj::PeerIdentity& identity);

}  // namespace tensord::server
