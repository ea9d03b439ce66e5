#pragma once
// State shared by every connection of one daemon, per-connection bounds, and
// the per-session authorization choke point.
//
// Threads: everything here lives on the event-loop thread, except the jobs
// of its worker pools (FileWorker). ServerState must outlive every
// connection, capability and promise that refers to it.

#include <capnp/capability.h>
#include <kj/async.h>
#include <kj/timer.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "acl/authorizer.h"
#include "acl/token_authenticator.h"
#include "compute/engine.h"
#include "protocol/tensord.capnp.h"
#include "server/config.h"
#include "server/file_worker.h"
#include "server/kernel_registry.h"
#include "server/metrics.h"
#include "server/quota.h"
#include "server/registry.h"
#include "server/staging_pool.h"

namespace spdlog {
class logger;
}

namespace tensord::server {

class GroupRegistry;

class ServerState final : private kj::TaskSet::ErrorHandler {
 public:
  ServerState(const Config& config, spdlog::logger& log, compute::Engine& engine, kj::Timer& timer);
  // Waits for the device's queued work first: a download's device
  // completion hands its copy to hostCopies (server/download.cpp), which
  // must still be there.
  ~ServerState();

  const Config& config;
  spdlog::logger& log;
  compute::Engine& engine;
  kj::Timer& timer;

  Registry registry;
  KernelRegistry kernels;  // user kernels (Session.kernelAdd), looked up by call() after the built-in ops
  StagingPool staging{engine};
  FileWorker files;            // disk I/O of loadFile/saveFile and the state directory, off the loop
  acl::Authorizer authorizer;  // policy replaced on reload (SIGHUP)
  QuotaTracker quotas{registry, engine, authorizer};  // the policy's per-principal quotas
  // Denials and authentication failures, one line each (config audit_log);
  // null: they go to `log` under the same format.
  std::shared_ptr<spdlog::logger> audit;
  std::shared_ptr<const acl::TokenAuthenticator> tokens;  // replaced on reload (SIGHUP)
  // Every Tensor capability is made here, so call() can find the entry behind
  // a capability a client passes back.
  capnp::CapabilityServerSet<proto::Tensor> tensorCaps;

  uint64_t opsExecuted = 0;    // op calls validated and enqueued since start
  uint64_t inflightCalls = 0;  // over all connections
  bool draining = false;       // set on SIGTERM: new calls are refused
  // Set when the Vulkan device reported VK_ERROR_DEVICE_LOST (a kernel the
  // driver gave up on): the daemon stops itself and exits non-zero for the
  // service manager to restart it, without saving what the device held.
  bool deviceLost = false;
  uint64_t nextSessionId = 1;
  // The config file re-read by reload (SIGHUP, Session.adminReload).
  std::filesystem::path configPath;
  // Open sessions per principal (Session.status "connections").
  std::map<std::string, uint64_t, std::less<>> sessionsByPrincipal;
  Metrics metrics;  // Session.stats and the Prometheus endpoint
  GroupRegistry* groups = nullptr;  // groups of daemons (group.h); set by runDaemon, which owns it

  // Background work whose failure only needs logging (e.g. op completions).
  void addTask(kj::Promise<void> task) { tasks_.add(kj::mv(task)); }

  // Fills DaemonInfo (memory from the engine plus registry counts).
  void fillInfo(proto::DaemonInfo::Builder info) const;

  // Writes one audit line: principal ("" shown as "-"), peer, action, resource, reason.
  void auditDenial(std::string_view principal, std::string_view peer, std::string_view action,
                   std::string_view resource, std::string_view reason) const;

 private:
  void taskFailed(kj::Exception&& exception) override;
  kj::TaskSet tasks_{*this};

 public:
  // Downloads' copies out of staging slots, at full priority: a download
  // waits for them. Declared after tasks_ so that it is destroyed first: its
  // destructor waits for the running copy, whose memory a task may be
  // keeping alive (keepUntilSettled). (`files` is declared before tasks_:
  // what tasks hold may still hand it jobs as they are destroyed.)
  FileWorker hostCopies{2, /*nice=*/0};
  // Collectives' copies of received chunks off their messages
  // (FileWorker::copy), on threads of their own: no chunk waits behind a
  // download's copy.
  FileWorker chunkCopies{2, /*nice=*/0};
};

class ConnectionState;

// Counts one call in flight (on its connection and overall) while alive.
class CallGuard {
 public:
  CallGuard(std::shared_ptr<ConnectionState> connection);
  CallGuard(CallGuard&& other) noexcept = default;
  CallGuard& operator=(CallGuard&&) = delete;
  ~CallGuard();

 private:
  std::shared_ptr<ConnectionState> connection_;
};

class ConnectionState {
 public:
  ConnectionState(ServerState& server, std::string peer) : server(server), peer(std::move(peer)) {}

  // Admits one more call. Throws OVERLOADED past
  // limits.max_inflight_calls_per_connection (the connection keeps working)
  // and DISCONNECTED while the daemon shuts down.
  static CallGuard enterCall(const std::shared_ptr<ConnectionState>& connection, std::string_view method);

  ServerState& server;
  const std::string peer;
  uint32_t inflight = 0;
};

// One authenticated session: a principal bound to a connection. Shared by the
// Session capability and the Tensor/TensorWriter capabilities it hands out.
class SessionState {
 public:
  SessionState(std::shared_ptr<ConnectionState> connection, acl::Principal principal, uint64_t id)
      : connection(std::move(connection)),
        principal(std::move(principal)),
        id(id),
        usage(this->connection->server.metrics.principal(this->principal.name)) {
    ++this->connection->server.sessionsByPrincipal[this->principal.name];
  }
  ~SessionState() {
    auto& sessions = connection->server.sessionsByPrincipal;
    if (auto it = sessions.find(principal.name); it != sessions.end() && --it->second == 0) sessions.erase(it);
  }
  SessionState(const SessionState&) = delete;
  SessionState& operator=(const SessionState&) = delete;

  // The one authorization choke point: every op call and tensor access of
  // this session passes here before anything is enqueued or changed. Throws
  // FAILED "permission denied: principal 'bob' may not call op 'matmul'
  // (category @linalg): ..." (and writes an audit line) when the policy says no.
  // `category` is the op's category for kCallOp.
  void authorize(acl::Action action, std::string_view resource, std::string_view category = {}) const;

  // Like authorize, but returns false instead of throwing, so the caller can
  // answer exactly as for a name that does not exist (restore, delete). The
  // denial is still audited.
  bool authorizeHidden(acl::Action action, std::string_view resource) const;

  // The policy's answer, with no logging (filtering listings).
  bool permits(acl::Action action, std::string_view resource) const;

  CallGuard enterCall(std::string_view method) const {
    ++usage.calls;
    return ConnectionState::enterCall(connection, method);
  }
  ServerState& server() const { return connection->server; }

  // Program order for in-place calls. A call is enqueued once its inputs
  // resolve, which may be later than a request that follows it (a download
  // of a parameter the call updates, say). So a call that writes an input in
  // place registers the promise of its enqueueing, and every later call or
  // download of the session waits for it first: it sees the write.
  kj::Promise<void> afterInPlaceCalls();
  void addInPlaceCall(kj::Promise<void> enqueued);
  // addInPlaceCall for a request whose work ends with `enqueueing`; returns
  // it, failing as it fails.
  kj::Promise<void> inPlace(kj::Promise<void> enqueueing);

  const std::shared_ptr<ConnectionState> connection;
  const acl::Principal principal;
  const uint64_t id;
  PrincipalMetrics& usage;  // this principal's counters in server().metrics

 private:
  kj::Maybe<kj::ForkedPromise<void>> inPlace_;  // the latest in-place call's enqueueing
};

}  // namespace tensord::server
