#include "server/server_state.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <ctime>

#include "server/wire.h"

namespace tensord::server {

ServerState::ServerState(const Config& config, spdlog::logger& log, compute::Engine& engine, kj::Timer& timer)
    : config(config),
      log(log),
      engine(engine),
      timer(timer),
      tokens(std::make_shared<const acl::TokenAuthenticator>(config.tokens)) {}

ServerState::~ServerState() { engine.waitIdle(); }

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

namespace {

// "call op 'matmul' (category @linalg)", "read tensor 'x'", "list tensors" ...
std::string describe(acl::Action action, std::string_view resource, std::string_view category) {
  const std::string quoted = "'" + std::string(resource) + "'";
  switch (action) {
    case acl::Action::kCallOp:
      return "call op " + quoted + (category.empty() ? "" : " (category @" + std::string(category) + ")");
    case acl::Action::kReadTensor:
      return "read tensor " + quoted;
    case acl::Action::kWriteTensor:
      return resource.empty() ? std::string("upload a tensor") : "write tensor " + quoted;
    case acl::Action::kDeleteTensor:
      return "delete tensor " + quoted;
    case acl::Action::kSaveTensor:
      return "save a tensor as " + quoted;
    case acl::Action::kRestoreTensor:
      return "restore tensor " + quoted;
    case acl::Action::kListTensors:
      return "list tensors";
    case acl::Action::kLoadFile:
      return "load the file " + quoted;
    case acl::Action::kSaveFile:
      return "save to the file " + quoted;
    case acl::Action::kManageKernel:
      return "register or remove the kernel " + quoted;
    default:
      return "use " + std::string(acl::actionName(action));
  }
}

// One line of key=value pairs; values with spaces or quotes are quoted.
std::string auditValue(std::string_view value) {
  if (value.empty()) return "-";
  bool plain = true;
  for (char c : value) plain = plain && c > ' ' && c != '"' && c != '\\' && c != 0x7f;
  if (plain) return std::string(value);
  std::string out = "\"";
  for (char c : value) {
    if (c == '"' || c == '\\') out += '\\';
    out += (c == '\n' || c == '\r') ? ' ' : c;
  }
  return out + "\"";
}

std::string utcNow() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buf[80];  // room for any int the compiler can imagine in each field
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, int(millis));
  return buf;
}

}  // namespace

void ServerState::auditDenial(std::string_view principal, std::string_view peer, std::string_view action,
                              std::string_view resource, std::string_view reason) const {
  spdlog::logger& out = audit ? *audit : log;
  out.warn("audit time={} principal={} peer={} action={} resource={} reason={}", utcNow(), auditValue(principal),
           auditValue(peer), auditValue(action), auditValue(resource), auditValue(reason));
}

kj::Promise<void> SessionState::afterInPlaceCalls() {
  KJ_IF_MAYBE (pending, inPlace_) {
    return pending->addBranch();
  }
  return kj::READY_NOW;
}

void SessionState::addInPlaceCall(kj::Promise<void> enqueued) {
  // Its failure is the call's own error; those who wait only need it to be over.
  inPlace_ = afterInPlaceCalls()
                 .then([enqueued = kj::mv(enqueued)]() mutable { return kj::mv(enqueued); })
                 .catch_([](kj::Exception&&) {})
                 .fork();
}

kj::Promise<void> SessionState::inPlace(kj::Promise<void> enqueueing) {
  auto forked = enqueueing.fork();
  addInPlaceCall(forked.addBranch());
  return forked.addBranch();
}

void SessionState::authorize(acl::Action action, std::string_view resource, std::string_view category) const {
  const acl::Decision decision = server().authorizer.check(principal, {action, resource, category});
  if (decision.allowed) return;
  std::string message =
      "permission denied: principal '" + principal.name + "' may not " + describe(action, resource, category);
  if (!decision.reason.empty()) message += ": " + decision.reason;
  server().auditDenial(principal.name, connection->peer, acl::actionName(action), resource, message);
  kj::throwFatalException(failed(std::move(message)));
}

bool SessionState::authorizeHidden(acl::Action action, std::string_view resource) const {
  const acl::Decision decision = server().authorizer.check(principal, {action, resource, {}});
  if (decision.allowed) return true;
  std::string message =
      "permission denied: principal '" + principal.name + "' may not " + describe(action, resource, {});
  if (!decision.reason.empty()) message += ": " + decision.reason;
  server().auditDenial(principal.name, connection->peer, acl::actionName(action), resource,
                       message + " (answered as not found)");
  return false;
}

bool SessionState::permits(acl::Action action, std::string_view resource) const {
  return server().authorizer.check(principal, {action, resource, {}}).allowed;
}

}  // namespace tensord::server
