#include "server/server_state.h"

#include <spdlog/spdlog.h>

#include "server/wire.h"

namespace tensord::server {

ServerState::ServerState(const Config& config, spdlog::logger& log, compute::Engine& engine, kj::Timer& timer)
    : config(config),
      log(log),
      engine(engine),
      timer(timer),
      tokens(std::make_shared<const acl::TokenAuthenticator>(config.tokens)) {}

void ServerState::fillInfo(proto::DaemonInfo::Builder info) const {
  info.setVersion(TENSORD_VERSION);
  info.setProtocolVersion(proto::PROTOCOL_VERSION);
  fillDeviceInfo(info.initDevice(), engine);
  const compute::MemoryStats stats = engine.memoryStats();
  auto memory = info.initMemory();
  memory.setLiveBytes(stats.liveBytes);
  memory.setReservedBytes(stats.reservedBytes);
  memory.setCachedBytes(stats.cachedBytes);
  memory.setLimitBytes(stats.limitBytes);
  memory.setTensorCount(registry.liveCount());
  memory.setNamedCount(registry.namedCount());
  info.setOpsExecuted(opsExecuted);
  info.setMaxTensorBytes(config.limits.maxTensorBytes);
  info.setChunkBytes(kChunkBytes);
}

void ServerState::taskFailed(kj::Exception&& exception) {
  log.warn("background task failed: {}", exception.getDescription().cStr());
}

CallGuard::CallGuard(std::shared_ptr<ConnectionState> connection) : connection_(std::move(connection)) {
  ++connection_->inflight;
  ++connection_->server.inflightCalls;
}

CallGuard::~CallGuard() {
  if (!connection_) return;  // moved from
  --connection_->inflight;
  --connection_->server.inflightCalls;
}

CallGuard ConnectionState::enterCall(const std::shared_ptr<ConnectionState>& connection, std::string_view method) {
  ServerState& server = connection->server;
  if (server.draining) kj::throwFatalException(disconnected(std::string(method) + ": tensord is shutting down"));
  const uint32_t limit = server.config.limits.maxInflightCallsPerConnection;
  if (connection->inflight >= limit) {
    kj::throwFatalException(overloaded(std::string(method) + ": too many calls in flight on this connection (limit " +
                                       std::to_string(limit) + ", limits.max_inflight_calls_per_connection)"));
  }
  return CallGuard(connection);
}

void SessionState::authorize(acl::Action action, std::string_view resource) const {
  const acl::Decision decision = server().authorizer.check(principal, action, resource);
  if (decision.allowed) return;
  std::string message =
      "permission denied: principal '" + principal.name + "' may not " + std::string(acl::actionName(action));
  if (!resource.empty()) message += " '" + std::string(resource) + "'";
  if (!decision.reason.empty()) message += ": " + decision.reason;
  server().log.warn("denied: {} (session {}, {})", message, id, connection->peer);
  kj::throwFatalException(failed(std::move(message)));
}

}  // namespace tensord::server
