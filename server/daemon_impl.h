#pragma once
// DaemonImpl: the bootstrap capability of one connection. It only identifies
// the daemon and authenticates; all work hangs off the Session it returns.
//
// Threads: the event-loop thread only.

#include <memory>

#include "protocol/tensord.capnp.h"
#include "server/server_state.h"

namespace tensord::server {

class DaemonImpl final : public proto::Daemon::Server {
 public:
  explicit DaemonImpl(std::shared_ptr<ConnectionState> connection) : connection_(std::move(connection)) {}

 protected:
  kj::Promise<void> info(InfoContext context) override;
  kj::Promise<void> authenticate(AuthenticateContext context) override;

 private:
  std::shared_ptr<ConnectionState> connection_;
};

}  // namespace tensord::server
