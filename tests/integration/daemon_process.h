#pragma once
// DaemonProcess: a real tensord started for one test (or one benchmark run).
//
// It writes a config into a fresh temporary directory (state and cache dirs
// inside it, its own principal and token), starts the daemon with
// `--listen 127.0.0.1:0`, and waits for the `listening on HOST:PORT` line. A
// background thread keeps draining the daemon's output into `log()` so the
// daemon never blocks on a full pipe. The destructor kills a daemon that was
// not stopped and removes the temporary directory.

#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/process.h"

namespace tensord::testing {

struct DaemonOptions {
  std::filesystem::path binary;  // "" = $TENSORD_BUILD_DIR/server/tensord
  std::string principal = "tester";
  std::string token = "integration-test-token";
  std::string logLevel = "info";
  std::string listen = "127.0.0.1:0";  // the config's listen and the --listen flag
  nlohmann::json limits = nlohmann::json::object();  // merged into the config's "limits"
  nlohmann::json extra = nlohmann::json::object();   // merged into the config's top level
  EnvChanges env;                                    // the daemon's environment changes (NOTIFY_SOCKET ...)
  std::vector<std::string> wrapper;                  // runs `wrapper... tensord ARGS` (an exec wrapper), if set
  std::vector<std::string> args;                     // extra daemon arguments (--log-level debug)
  std::chrono::milliseconds startTimeout = std::chrono::seconds(90);
};

class DaemonProcess {
 public:
  // Starts the daemon; throws std::runtime_error (with the daemon's log) if it
  // exits or does not report its address within the timeout.
  explicit DaemonProcess(DaemonOptions options = {});
  ~DaemonProcess();
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  const std::string& address() const { return address_; }  // "127.0.0.1:PORT"
  // "127.0.0.1:PORT" of the Prometheus endpoint (the config's metrics.listen
  // is 127.0.0.1:0 unless `extra` says otherwise); "" when off.
  const std::string& metricsAddress() const { return metricsAddress_; }
  const std::string& token() const { return options_.token; }
  const std::string& principal() const { return options_.principal; }
  const std::filesystem::path& configPath() const { return configPath_; }
  const std::filesystem::path& dir() const { return dir_; }
  std::string log() const;  // everything the daemon printed so far
  pid_t pid() const { return process_->pid(); }  // for /proc/PID inspection

  // SIGTERM, then waits; returns the wait status, or nullopt if it did not
  // exit within the timeout (it is then killed).
  std::optional<int> stop(std::chrono::milliseconds timeout = std::chrono::seconds(60));
  bool running() const { return !stopped_; }
  void signal(int sig);  // e.g. SIGHUP to reload

 private:
  void drain();  // background thread body

  DaemonOptions options_;
  std::filesystem::path dir_;
  std::filesystem::path configPath_;
  std::string address_;
  std::string metricsAddress_;
  mutable std::mutex mu_;
  std::string log_;  // GUARDED_BY(mu_)
  std::unique_ptr<Subprocess> process_;
  std::thread drainThread_;
  bool stopped_ = false;
};

// Lowercase hex SHA-256 of `text` (what the config stores for a token).
std::string sha256Hex(const std::string& text);

// Directory of the build under test: $TENSORD_BUILD_DIR (set by ctest).
std::filesystem::path buildDir();

}  // namespace tensord::testing
