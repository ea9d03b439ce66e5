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
#include "server/group.h"
#include "server/listener.h"
#include "server/metrics.h"
#include "server/metrics_http.h"
#include "server/persistence.h"
#include "server/server_state.h"
#include "server/socket_activation.h"
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

// Keeps systemd's STATUS= line current: looked at once a second and sent
// only when it changed, so a busy daemon sends at most one a second and an
// idle one none.
kj::Promise<void> publishStatus(ServerState& state, std::string prefix, std::string last) {
  return state.timer.afterDelay(1 * kj::SECONDS)
      .then([&state, prefix = std::move(prefix), last = std::move(last)]() mutable {
        std::string now = prefix + statusLine(state);
        if (now != last) notifySystemd("STATUS=" + now);
        return publishStatus(state, std::move(prefix), std::move(now));
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

  // A socket systemd passed (tensord.socket) wins over `listen`. Taken while
  // this is the only thread: it unsets LISTEN_* in the environment, which
  // the drivers' threads may be reading later.
  std::optional<PassedSocket> passed;
  try {
    passed = takePassedSocket();
  } catch (const ConfigError& e) {
    log->error("{}", e.what());
    return 1;
  }

  try {
    createDirectories(config);
  } catch (const ConfigError& e) {
    log->error("{}", e.what());
    return 1;
  }

  // Filled by the engine's completion thread, read by stats and /metrics.
  auto deviceTimes = std::make_shared<DeviceTimes>();
  std::unique_ptr<compute::Engine> engine;
  try {
    engine = std::make_unique<compute::Engine>(compute::EngineOptions{
        .device = config.device,
        .cacheDir = config.cacheDir,
        .memoryLimitBytes = config.limits.memoryLimitBytes,
        .stagingSlotBytes = config.staging.slotBytes,
        .stagingSlots = config.staging.slots,
        .fairSharing = config.fairSharing,
        .f32ProductsOnTensorCores = config.f32ProductsOnTensorCores,
        .logger = log,
        .deviceTimeObserver =
            [deviceTimes, log, maxUserNanos = uint64_t(config.kernelMaxDispatchMs) * 1000000](
                std::span<const compute::DeviceTime> times) {
              deviceTimes->record(times);
              // User kernels that ran longer than kernels.max_dispatch_ms.
              for (const auto& t : times) {
                if (t.what.starts_with("user.") && t.nanos > maxUserNanos) {
                  log->warn("kernel {} ran {:.1f} ms on the device; kernels.max_dispatch_ms is {}", t.what,
                            double(t.nanos) / 1e6, maxUserNanos / 1000000);
                }
              }
            },
        .deviceTimeInterval = std::chrono::milliseconds(config.metrics.deviceTimeIntervalMs),
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
  }

  ServerState state(config, *log, *engine, timer);
  state.metrics.deviceTimes = deviceTimes;
  state.configPath = configPath;
  state.authorizer.setPolicy(std::move(policy));
  try {
    state.audit = makeAuditLogger(config, log);
  } catch (const std::exception& e) {
    log->error("{}", e.what());
    return 1;
  }
  loadNamedTensors(state, config.stateDir, io.waitScope);
  state.kernels.load(*engine, config.stateDir, *log);

  // The Prometheus endpoint binds first, so its line is in the log before
  // the RPC address that says the daemon is up.
  std::unique_ptr<MetricsServer> metricsServer;
  if (config.metrics.enabled) {
    try {
      auto address = io.provider->getNetwork().parseAddress(config.metrics.listen.str()).wait(io.waitScope);
      metricsServer = std::make_unique<MetricsServer>(state, timer, address->listen());
    } catch (const kj::Exception& e) {
      log->error("cannot listen on {} for metrics (metrics.listen): {}", config.metrics.listen.str(),
                 e.getDescription().cStr());
      return 1;
    }
    state.metrics.metricsAddress = HostPort{config.metrics.listen.host, metricsServer->port()}.str();
    log->info("metrics on http://{}/metrics", state.metrics.metricsAddress);
  }

  kj::Own<kj::ConnectionReceiver> receiver;
  HostPort bound;
  const bool activated = passed.has_value();
  try {
    if (passed) {
      bound = passed->address;
      receiver = io.lowLevelProvider->wrapListenSocketFd(
          passed->fd, kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP | kj::LowLevelAsyncIoProvider::ALREADY_CLOEXEC);
      if (!tls && !bound.isLoopback() && !config.allowRemotePlaintext) {
        throw ConfigError("socket activation: plain TCP on the non-loopback address " + bound.str() +
                          " is refused: tokens and data would cross the network unencrypted; pass a loopback "
                          "address in tensord.socket, configure tls, or set allow_remote_plaintext to true");
      }
    } else {
      auto address = io.provider->getNetwork().parseAddress(config.listen.str()).wait(io.waitScope);
      receiver = address->listen();
      bound = HostPort{config.listen.host, uint16_t(receiver->getPort())};
    }
  } catch (const ConfigError& e) {
    log->error("{}", e.what());
    return 1;
  } catch (const kj::Exception& e) {
    log->error("cannot listen on {}: {}", config.listen.str(), e.getDescription().cStr());
    return 1;
  }
  if (!tls && !bound.isLoopback()) {
    // The listen policy let it through, so allow_remote_plaintext is true.
    log->warn(
        "plain TCP on the non-loopback address {} (allow_remote_plaintext): tokens and tensor data cross the "
        "network unencrypted; configure tls instead",
        activated ? bound.str() : config.listen.str());
  }
  // Groups of daemons (collectives): dialing peers needs the listener up
  // here first, so the static groups start forming right after it.
  std::unique_ptr<GroupRegistry> groups;
  try {
    groups = std::make_unique<GroupRegistry>(state);
  } catch (const ConfigError& e) {
    log->error("{}", e.what());
    return 1;
  }
  state.groups = groups.get();
  auto listener = std::make_unique<Listener>(state, kj::mv(receiver), tls.get());
  listener->start();
  groups->formStatic();
  log->info("listening on {} ({}{})", bound.str(),
            !tls                                              ? "plain TCP"
            : config.tls->clientAuth == ClientAuth::kRequired ? "TLS, client certificates required"
            : config.tls->clientAuth == ClientAuth::kOptional ? "TLS, client certificates optional"
                                                              : "TLS",
            activated ? ", socket passed by systemd" : "");
  if (tls) log->info("TLS certificate {}: {}", config.tls->certFile.string(), tls->describeCertificate());
  log->flush();
  const std::string statusPrefix = bound.str() + ": ";
  notifySystemd("READY=1\nSTATUS=" + statusPrefix + statusLine(state));
  kj::Promise<void> statusUpdates = kj::READY_NOW;
  if (systemdNotifying()) {
    statusUpdates =
        publishStatus(state, statusPrefix, statusPrefix + statusLine(state)).eagerlyEvaluate([&log](kj::Exception&& e) {
          log->error("STATUS updates stopped: {}", e.getDescription().cStr());
        });
  }

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
  statusUpdates = kj::READY_NOW;
  metricsServer.reset();
  listener->stopAccepting();
  state.draining = true;
  groups->closeAll("the member is stopping");  // collectives in flight fail now, everywhere

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
    if (state.deviceLost) {
      // The tensors' memory is gone with the device: keep the previous state file.
      log->error("the device was lost: named tensors are not saved; exiting with status 1");
      status = 1;
    } else {
      saveNamedTensors(state, config.stateDir, io.waitScope);
    }
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
