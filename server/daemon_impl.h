#pragma once
// DaemonImpl: the bootstrap capability of one connection. It only identifies
// the daemon and authenticates; all work hangs off the Session it returns.
//
// Threads: the event-loop thread only.

#include <memory>
#include <string>
#include <vector>

#include "protocol/tensord.capnp.h"
#include "server/server_state.h"

namespace tensord::server {

// What the listener knows about how a connection may authenticate, shared
// with its DaemonImpl: the verified client certificate's names (TLS), and
// whether a session was opened yet (else the auth_timeout_ms closes it).
struct ConnectionAuth {
  bool tls = false;
  std::vector<std::string> certificateNames;  // CN, then DNS/email SANs; empty: none verified
  bool authenticated = false;
};

class DaemonImpl final : public proto::Daemon::Server {
 public:
  explicit DaemonImpl(std::shared_ptr<ConnectionState> connection,
                      std::shared_ptr<ConnectionAuth> auth = std::make_shared<ConnectionAuth>())
      : connection_(std::move(connection)), auth_(std::move(auth)) {}

 protected:
  kj::Promise<void> info(InfoContext context) override;
  kj::Promise<void> authenticate(AuthenticateContext context) override;
  kj::Promise<void> authenticateWithCertificate(AuthenticateWithCertificateContext context) override;

 private:
  std::shared_ptr<ConnectionState> connection_;
  std::shared_ptr<ConnectionAuth> auth_;
};

}  // namespace tensord::server
