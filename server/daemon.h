#pragma once
// The daemon's life: engine, listening socket, accept loop, signals, drain.

#include <filesystem>
#include <memory>

#include "acl/authorizer.h"
#include "server/config.h"

namespace spdlog {
class logger;
}

namespace tensord::server {

// Seconds SIGTERM waits for in-flight calls, then for the device, before
// closing connections anyway.
inline constexpr int kDrainTimeoutSeconds = 30;

// Runs until SIGTERM or SIGINT; returns the process exit code. `config` has
// its directories resolved; `configPath` is re-read on SIGHUP (tokens and
// the policy_file). `policy` is the policy loaded from config.policyFile.
// Must be called before any other thread exists (signals are captured first).
int runDaemon(const Config& config, const std::filesystem::path& configPath, std::shared_ptr<spdlog::logger> log,
              std::shared_ptr<const acl::Policy> policy);

}  // namespace tensord::server
