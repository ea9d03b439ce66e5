#include "server/daemon_impl.h"

#include <spdlog/spdlog.h>

#include "server/session_impl.h"
#include "server/wire.h"

namespace tensord::server {

kj::Promise<void> DaemonImpl::info(InfoContext context) {
  auto guard = ConnectionState::enterCall(connection_, "info");
  connection_->server.fillInfo(context.getResults().initInfo());
  return kj::READY_NOW;
}

kj::Promise<void> DaemonImpl::authenticate(AuthenticateContext context) {
  auto guard = ConnectionState::enterCall(connection_, "authenticate");
  ServerState& server = connection_->server;
  // Hold the authenticator in use now: a reload may replace it meanwhile.
  std::shared_ptr<const acl::TokenAuthenticator> tokens = server.tokens;
  auto token = context.getParams().getToken();
  auto principal = tokens->authenticate(std::string_view(token.cStr(), token.size()));
  if (!principal) {
    server.log.warn("authentication failed from {}: unknown token", connection_->peer);
    kj::throwFatalException(failed("authentication failed: unknown token"));
  }
  const uint64_t id = server.nextSessionId++;
  server.log.info("session {} opened for '{}' from {}", id, principal->name, connection_->peer);
  auto session = std::make_shared<SessionState>(connection_, *principal, id);
  auto results = context.getResults();
  results.setPrincipal(principal->name);
  results.setSession(kj::heap<SessionImpl>(kj::mv(session)));
  return kj::READY_NOW;
}

}  // namespace tensord::server
