#pragma once
// The listener's TLS side: the server certificate and key, the client CA and
// the client_auth mode of the config's `tls` object, in a KJ TlsContext
// (OpenSSL 3, TLS 1.2 or later), plus reading the names a verified client
// certificate offers as identity. reload() re-reads the files (SIGHUP): new
// handshakes use the new context, connections already open keep theirs.
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

  // The server side of the handshake with the context in force now. Resolves
  // once it completed (and the client certificate, when one is asked for and
  // sent, verified); the peer identity is then a kj::TlsPeerIdentity.
  kj::Promise<kj::AuthenticatedStream> accept(kj::AuthenticatedStream stream);

  // Reads the files afresh and puts them in force for new handshakes. Throws
  // ConfigError naming the tls.* key at fault; the previous context then stays.
  void reload(const TlsConfig& config);

  // "subject '/CN=localhost', expires Jun  1 12:00:00 2030 GMT": the
  // certificate new connections are offered.
  std::string describeCertificate() const;

 private:
  struct Impl;
  static std::shared_ptr<Impl> load(const TlsConfig& config);
  std::shared_ptr<Impl> impl_;
};

// The verified client certificate's subject CN and its DNS and email SANs,
// in that order; empty when `identity` is not TLS or no certificate was sent.
std::vector<std::string> certificateNames(kj::PeerIdentity& identity);

}  // namespace tensord::server
