#pragma once
// The listener's TLS side: the server certificate and key, the client CA and
// the client_auth mode of the config's `tls` object, in a KJ TlsContext
// (OpenSSL 3, TLS 1.2 or later) whose connections are protocol::TlsStream,
// plus reading the names a verified client certificate offers as identity. reload() re-reads the files (SIGHUP): new
// handshakes use the new context, connections already open keep theirs.
//
// Threads: the event-loop thread only.

#include <kj/async-io.h>
#include <openssl/x509.h>

#include <memory>
#include <string>
#include <vector>

#include "server/config.h"

namespace tensord::server {

// A connection through the TLS handshake, and the names its verified client
// certificate offers as identity (certificateNames(); empty without one).
struct TlsAccepted {
  kj::Own<kj::AsyncIoStream> stream;
  std::vector<std::string> certificateNames;
};

class ServerTls {
 public:
  // Reads the PEM files; throws ConfigError naming the tls.* key at fault.
  explicit ServerTls(const TlsConfig& config);
  ~ServerTls();
  ServerTls(const ServerTls&) = delete;
  ServerTls& operator=(const ServerTls&) = delete;

  // The server side of the handshake with the context in force now. Resolves
  // once it completed (and the client certificate, when one is asked for and
  // sent, verified).
  kj::Promise<TlsAccepted> accept(kj::Own<kj::AsyncIoStream> stream);

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

// A verified client certificate's subject CN and its DNS and email SANs, in
// that order; empty for nullptr (no certificate sent).
std::vector<std::string> certificateNames(X509* certificate);

}  // namespace tensord::server
