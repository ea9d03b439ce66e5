#include "tests/integration/daemon_process.h"

#include <openssl/evp.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>

namespace tensord::testing {
namespace fs = std::filesystem;

std::string sha256Hex(const std::string& text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(text.data(), text.size(), digest, &len, EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("EVP_Digest(sha256) failed");
  }
  std::string hex;
  char buf[3];
  for (unsigned int i = 0; i < len; ++i) {
    std::snprintf(buf, sizeof buf, "%02x", digest[i]);
    hex += buf;
  }
  return hex;
}

fs::path buildDir() {
  const char* dir = std::getenv("TENSORD_BUILD_DIR");
  if (dir == nullptr || *dir == '\0') {
    throw std::runtime_error("TENSORD_BUILD_DIR is not set (run the tests through ctest)");
  }
  return dir;
}

DaemonProcess::DaemonProcess(DaemonOptions options) : options_(std::move(options)) {
  if (options_.binary.empty()) options_.binary = buildDir() / "server" / "tensord";
  if (!fs::exists(options_.binary)) throw std::runtime_error("daemon binary not found: " + options_.binary.string());

  fs::path base = fs::temp_directory_path() / "tensord-test-XXXXXX";
  std::string tmpl = base.string();
  if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + tmpl);
  dir_ = tmpl;

  nlohmann::json config = {
      {"listen", options_.listen},
      {"state_dir", (dir_ / "state").string()},
      {"cache_dir", (dir_ / "cache").string()},
      {"log_level", options_.logLevel},
      {"metrics", {{"listen", "127.0.0.1:0"}}},  // never a fixed port: tests run side by side
      {"auth", {{"tokens", {{{"principal", options_.principal}, {"token_sha256", sha256Hex(options_.token)}}}}}},
  };
  if (!options_.limits.empty()) config["limits"] = options_.limits;
  config.update(options_.extra);
  configPath_ = dir_ / "tensord.json";
  std::ofstream(configPath_) << config.dump(2) << "\n";

  std::vector<std::string> argv = options_.wrapper;
  for (const auto& arg : {options_.binary.string(), std::string("--config"), configPath_.string(),
                          std::string("--listen"), options_.listen}) {
    argv.push_back(arg);
  }
  argv.insert(argv.end(), options_.args.begin(), options_.args.end());
  process_ = std::make_unique<Subprocess>(argv, options_.env);

  // Read lines until the address appears (or the daemon exits / time runs out).
  // The metrics endpoint's line comes before it.
  const std::string marker = "listening on ";
  const std::string metricsMarker = "metrics on http://";
  auto deadline = std::chrono::steady_clock::now() + options_.startTimeout;
  std::string pending;
  std::string failure;
  while (address_.empty() && failure.empty()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      failure = "did not log '" + marker + "HOST:PORT' within " + std::to_string(options_.startTimeout.count()) + " ms";
      break;
    }
    pollfd pfd{process_->outputFd(), POLLIN, 0};
    if (poll(&pfd, 1, int(std::min<int64_t>(left.count(), 1000))) <= 0) continue;
    char buf[4096];
    ssize_t n = read(process_->outputFd(), buf, sizeof buf);
    if (n <= 0) {
      auto status = process_->wait(std::chrono::seconds(5));
      failure = "exited before listening (" + (status ? describeStatus(*status) : std::string("still running")) + ")";
      stopped_ = status.has_value();
      break;
    }
    log_.append(buf, size_t(n));
    pending.append(buf, size_t(n));
    size_t eol;
    while ((eol = pending.find('\n')) != std::string::npos) {
      std::string line = pending.substr(0, eol);
      pending.erase(0, eol + 1);
      if (size_t at = line.find(metricsMarker); at != std::string::npos) {
        std::string rest = line.substr(at + metricsMarker.size());
        metricsAddress_ = rest.substr(0, rest.find('/'));
        continue;
      }
      size_t at = line.find(marker);
      if (at == std::string::npos) continue;
      std::string rest = line.substr(at + marker.size());
      address_ = rest.substr(0, rest.find_first_of(" \t\r"));
      break;
    }
  }
  if (!failure.empty()) {
    std::string log = log_;
    process_.reset();  // kills it if still running
    stopped_ = true;
    fs::remove_all(dir_);
    throw std::runtime_error("tensord " + failure + "; its log:\n" + log);
  }
  drainThread_ = std::thread([this] { drain(); });
}

void DaemonProcess::drain() {
  char buf[4096];
  for (;;) {
    ssize_t n = read(process_->outputFd(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    std::lock_guard lock(mu_);
    log_.append(buf, size_t(n));
  }
}

void DaemonProcess::signal(int sig) {
  if (!stopped_) process_->signal(sig);
}

std::string DaemonProcess::log() const {
  std::lock_guard lock(mu_);
  return log_;
}

std::optional<int> DaemonProcess::stop(std::chrono::milliseconds timeout) {
  if (stopped_) return std::nullopt;
  process_->signal(SIGTERM);
  auto status = process_->wait(timeout);
  if (!status) {
    process_->signal(SIGKILL);
    process_->wait(std::chrono::seconds(10));
  }
  stopped_ = true;
  if (drainThread_.joinable()) drainThread_.join();  // the pipe closes with the daemon
  return status;
}

DaemonProcess::~DaemonProcess() {
  if (!stopped_) stop(std::chrono::seconds(10));
  if (drainThread_.joinable()) drainThread_.join();
  process_.reset();
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

}  // namespace tensord::testing
