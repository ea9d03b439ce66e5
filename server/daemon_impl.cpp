#include "server/daemon_impl.h"

#include <spdlog/spdlog.h>

#include "server/session_impl.h"
#include "server/wire.h"

namespace tensord::server {
namespace {

// connections quota: fails authentication (OVERLOADED) past the principal's limit.
void checkSessionQuota(ServerState& server, const std::string& principal) {
  auto it = server.sessionsByPrincipal.find(principal);
  server.quotas.checkSession(principal, it == server.sessionsByPrincipal.end() ? 0 : it->second);
}

}  // namespace

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
    server.auditDenial("", connection_->peer, "authenticate", "", "unknown token");
    kj::throwFatalException(failed("authentication failed: unknown token"));
  }
  checkSessionQuota(server, principal->name);
  const uint64_t id = server.nextSessionId++;
  server.log.info("session {} opened for '{}' from {}", id, principal->name, connection_->peer);
  auto session = std::make_shared<SessionState>(connection_, *principal, id);
  auto results = context.getResults();
  results.setPrincipal(principal->name);
  results.setSession(kj::heap<SessionImpl>(kj::mv(session)));
  auth_->authenticated = true;
  return kj::READY_NOW;
}

kj::Promise<void> DaemonImpl::authenticateWithCertificate(AuthenticateWithCertificateContext context) {
  auto guard = ConnectionState::enterCall(connection_, "authenticateWithCertificate");
  ServerState& server = connection_->server;
  const auto& names = auth_->certificateNames;
  if (names.empty()) {
    server.log.warn("certificate authentication failed from {}: no verified client certificate", connection_->peer);
    server.auditDenial("", connection_->peer, "authenticate", "", "no verified client certificate");
    kj::throwFatalException(failed(auth_->tls ? "authentication failed: no verified client certificate on this "
                                                "connection (the daemon's tls.client_ca_file must have signed it)"
                                              : "authentication failed: certificate authentication needs a TLS "
                                                "connection (tls://HOST:PORT) with a client certificate"));
  }
  const CertificateMapping* match = nullptr;
  for (const std::string& name : names) {
    for (const CertificateMapping& mapping : server.config.certificates) {
      if (mapping.subject == name) {
        match = &mapping;
        break;
      }
    }
    if (match != nullptr) break;
  }
  if (match == nullptr) {
    server.log.warn("certificate authentication failed from {}: '{}' is not in auth.certificates", connection_->peer,
                    names.front());
    server.auditDenial("", connection_->peer, "authenticate", names.front(), "certificate not in auth.certificates");
    kj::throwFatalException(
        failed("authentication failed: the client certificate ('" + names.front() +
               "') is not mapped to a principal (auth.certificates)"));
  }
  const acl::Principal principal{match->principal};
  checkSessionQuota(server, principal.name);
  const uint64_t id = server.nextSessionId++;
  server.log.info("session {} opened for '{}' (certificate '{}') from {}", id, principal.name, match->subject,
                  connection_->peer);
  auto session = std::make_shared<SessionState>(connection_, principal, id);
  auto results = context.getResults();
  results.setPrincipal(principal.name);
  results.setSession(kj::heap<SessionImpl>(kj::mv(session)));
  auth_->authenticated = true;
  return kj::READY_NOW;
}

}  // namespace tensord::server
