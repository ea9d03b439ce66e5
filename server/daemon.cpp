#include "server/daemon.h"

#include <kj/async-io.h>
#include <kj/async-unix.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "acl/policy_json.h"
#include "compute/engine.h"
#include "server/access.h"
#include "server/listener.h"
#include "server/persistence.h"
#include "server/server_state.h"
#include "server/systemd_notify.h"
#include "server/tls.h"
#include "server/wire.h"

namespace tensord::server {
namespace {

// SIGHUP: re-read the token list and the policy file; connections and
// sessions stay, and their next calls run under the new policy. Either both
// are replaced or, when something does not parse, neither. With TLS, the
// certificate, key and client CA files are re-read too (on their own: a bad
// certificate does not hold back a good policy): new connections get the new
// ones, open connections keep what they negotiated.
kj::Promise<void> reloadOnHangup(kj::UnixEventPort& port, ServerState& state, const std::filesystem::path& path,
                                 ServerTls* tls) {
  return port.onSignal(SIGHUP).then([&port, &state, path, tls](siginfo_t) {
    notifySystemd("RELOADING=1");
    try {
      AccessReload fresh = loadAccess(path);
      state.tokens = std::move(fresh.tokens);
      state.authorizer.setPolicy(std::move(fresh.policy));
      state.log.info("{}", fresh.description);
    } catch (const std::exception& e) {
      state.log.error("reload of {} failed, keeping the previous tokens and policy: {}", path.string(), e.what());
    }
    if (tls != nullptr) {
      const TlsConfig& files = *state.config.tls;
      try {
        tls->reload(files);
        state.log.info("reloaded the TLS certificate {} ({}) and key {}{}; new connections use them",
                       files.certFile.string(), tls->describeCertificate(), files.keyFile.string(),
                       files.clientCaFile.empty() ? "" : ", client CAs " + files.clientCaFile.string());
      } catch (const std::exception& e) {
        state.log.error("TLS reload failed, new connections keep the previous certificate: {}", e.what());
      }
    }
    notifySystemd("READY=1");
    return reloadOnHangup(port, state, path, tls);
  });
}

kj::Promise<void> feedWatchdog(kj::Timer& timer, std::chrono::microseconds interval) {
  notifySystemd("WATCHDOG=1");
  return timer.afterDelay(interval.count() / 2 * kj::MICROSECONDS).then([&timer, interval]() {
    return feedWatchdog(timer, interval);
  });
}

// Waits until no call is in flight, at most until `deadline`.
kj::Promise<bool> callsFinished(ServerState& state, kj::TimePoint deadline) {
  if (state.inflightCalls == 0) return true;
  if (state.timer.now() >= deadline) return false;
  return state.timer.afterDelay(10 * kj::MILLISECONDS).then([&state, deadline]() {
    return callsFinished(state, deadline);
  });
}

// engine.waitIdle() on a helper thread, so the loop can bound the wait.
bool deviceIdle(compute::Engine& engine, kj::Timer& timer, kj::WaitScope& waitScope, spdlog::logger& log) {
  auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
  // kj::Own's destructor may throw, which std::thread's state does not allow.
  auto fulfiller = std::make_shared<kj::Own<kj::CrossThreadPromiseFulfiller<void>>>(kj::mv(paf.fulfiller));
  std::thread waiter([&engine, fulfiller]() {
    try {
      engine.waitIdle();
      (*fulfiller)->fulfill();
    } catch (...) {
      (*fulfiller)->reject(fromExceptionPtr(std::current_exception()));
    }
  });
  bool idle = timer.timeoutAfter(kDrainTimeoutSeconds * kj::SECONDS, kj::mv(paf.promise))
                  .then([]() { return true; },
                        [&log](kj::Exception&& e) {
                          log.error("waiting for the device failed: {}", e.getDescription().cStr());
                          return false;
                        })
                  .wait(waitScope);
  if (idle) {
    waiter.join();
  } else {
    waiter.detach();
  }
  return idle;
}

}  // namespace

int runDaemon(const Config& config, const std::filesystem::path& configPath, std::shared_ptr<spdlog::logger> log,
              std::shared_ptr<const acl::Policy> policy) {
  // Before any thread exists, so every thread inherits the blocked signals.
  std::signal(SIGPIPE, SIG_IGN);
  kj::UnixEventPort::captureSignal(SIGTERM);
  kj::UnixEventPort::captureSignal(SIGINT);
  kj::UnixEventPort::captureSignal(SIGHUP);
  auto io = kj::setupAsyncIo();
  kj::Timer& timer = io.provider->getTimer();

  try {
    createDirectories(config);
  } catch (const ConfigError& e) {
    log->error("{}", e.what());
    return 1;
  }

  std::unique_ptr<compute::Engine> engine;
  try {
    engine = std::make_unique<compute::Engine>(compute::EngineOptions{
        .device = config.device,
        .cacheDir = config.cacheDir,
        .memoryLimitBytes = config.limits.memoryLimitBytes,
        .stagingSlotBytes = config.staging.slotBytes,
        .stagingSlots = config.staging.slots,
        .fairSharing = config.fairSharing,
        .logger = log,
    });
  } catch (const std::exception& e) {
    log->error("cannot start the compute engine: {}", e.what());
    return 1;
  }
  // The engine itself logs which device it chose.

  std::unique_ptr<ServerTls> tls;
  if (config.tls) {
    try {
      tls = std::make_unique<ServerTls>(*config.tls);
    } catch (const ConfigError& e) {
      log->error("{}", e.what());
      return 1;
    }
  } else if (!config.listen.isLoopback()) {
    // checkListenPolicy let it through, so allow_remote_plaintext is true.
    log->warn("plain TCP on the non-loopback address {} (allow_remote_plaintext): tokens and tensor data cross the "
              "network unencrypted; configure tls instead",
              config.listen.str());
  }

  ServerState state(config, *log, *engine, timer);
  state.configPath = configPath;
  state.authorizer.setPolicy(std::move(policy));
  try {
    state.audit = makeAuditLogger(config, log);
  } catch (const std::exception& e) {
    log->error("{}", e.what());
    return 1;
  }
  loadNamedTensors(state, config.stateDir, io.waitScope);
  kj::Own<kj::ConnectionReceiver> receiver;
  try {
    auto address = io.provider->getNetwork().parseAddress(config.listen.str()).wait(io.waitScope);
    receiver = address->listen();
  } catch (const kj::Exception& e) {
    log->error("cannot listen on {}: {}", config.listen.str(), e.getDescription().cStr());
    return 1;
  }
  const HostPort bound{config.listen.host, uint16_t(receiver->getPort())};
  auto listener = std::make_unique<Listener>(state, kj::mv(receiver), tls.get());
  listener->start();
  log->info("listening on {} ({})", bound.str(),
            !tls                                                    ? "plain TCP"
            : config.tls->clientAuth == ClientAuth::kRequired ? "TLS, client certificates required"
            : config.tls->clientAuth == ClientAuth::kOptional ? "TLS, client certificates optional"
                                                              : "TLS");
  if (tls) log->info("TLS certificate {}: {}", config.tls->certFile.string(), tls->describeCertificate());
  log->flush();
  notifySystemd("READY=1\nSTATUS=listening on " + bound.str());

  auto reloading =
      reloadOnHangup(io.unixEventPort, state, configPath, tls.get()).eagerlyEvaluate([&log](kj::Exception&& e) {
        log->error("SIGHUP handling stopped: {}", e.getDescription().cStr());
      });
  kj::Promise<void> watchdog = kj::READY_NOW;
  if (auto interval = systemdWatchdogInterval()) {
    watchdog = feedWatchdog(timer, *interval).eagerlyEvaluate(nullptr);
  }

  const siginfo_t stop =
      io.unixEventPort.onSignal(SIGTERM).exclusiveJoin(io.unixEventPort.onSignal(SIGINT)).wait(io.waitScope);
  log->info("received {}; no new connections, draining in-flight calls", strsignal(stop.si_signo));
  notifySystemd("STOPPING=1\nSTATUS=draining");
  listener->stopAccepting();
  state.draining = true;

  const kj::TimePoint deadline = timer.now() + kDrainTimeoutSeconds * kj::SECONDS;
  if (!callsFinished(state, deadline).wait(io.waitScope)) {
    log->warn("{} call(s) still in flight after {} s; closing connections", state.inflightCalls, kDrainTimeoutSeconds);
  }
  const size_t open = listener->connectionCount();
  listener.reset();  // closes the connections: their unnamed tensors go
  if (!deviceIdle(*engine, timer, io.waitScope, *log)) {
    log->error("the device did not finish its work within {} s; exiting without waiting", kDrainTimeoutSeconds);
    log->flush();
    std::_Exit(1);
  }
  int status = 0;
  try {
    saveNamedTensors(state, config.stateDir, io.waitScope);
  } catch (const std::exception& e) {
    log->error("saving the named tensors failed: {}", e.what());
    status = 1;
  } catch (const kj::Exception& e) {
    log->error("saving the named tensors failed: {}", e.getDescription().cStr());
    status = 1;
  }
  log->info("stopped: {} op call(s) served, {} connection(s) closed", state.opsExecuted, open);
  log->flush();
  return status;
}

}  // namespace tensord::server
