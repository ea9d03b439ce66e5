// The daemon's systemd integration against fakes: a notify socket that
// records what sd_notify sends (READY, STATUS, WATCHDOG, RELOADING,
// STOPPING), a listening socket passed the way systemd passes one
// (tensord_socket_activate), and the --log-level flag. The real unit under a
// real systemd is tests/systemd/boot_test.sh.

#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <regex>

#include "tests/integration/daemon_test.h"

namespace tensord::testing {
namespace {

namespace fs = std::filesystem;

// An AF_UNIX datagram socket standing in for systemd's $NOTIFY_SOCKET. A
// thread records every datagram; each is one sd_notify() call.
class FakeNotifySocket {
 public:
  FakeNotifySocket() {
    std::string tmpl = (fs::temp_directory_path() / "tensord-notify-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    path_ = dir_ / "notify";
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof addr.sun_path - 1);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      throw std::runtime_error("cannot bind the fake notify socket " + path_.string());
    }
    reader_ = std::thread([this] { read(); });
  }
  ~FakeNotifySocket() {
    stop_ = true;
    reader_.join();
    ::close(fd_);
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  const fs::path& path() const { return path_; }

  std::vector<std::string> messages() const {
    std::lock_guard lock(mu_);
    return messages_;
  }
  // Index of the first message from `from` on that has a line equal to
  // `line` (or, with a trailing '*', starting with it); -1 if none yet.
  int find(const std::string& line, size_t from = 0) const {
    std::lock_guard lock(mu_);
    for (size_t i = from; i < messages_.size(); ++i) {
      std::istringstream in(messages_[i]);
      for (std::string l; std::getline(in, l);) {
        const bool prefix = !line.empty() && line.back() == '*';
        if (prefix ? l.starts_with(line.substr(0, line.size() - 1)) : l == line) return int(i);
      }
    }
    return -1;
  }
  int waitFor(const std::string& line, size_t from = 0) const {
    int at = -1;
    waitUntil([&] { return (at = find(line, from)) >= 0; }, std::chrono::seconds(60));
    return at;
  }
  std::string dump() const {
    std::string out;
    for (const auto& m : messages()) out += "  [" + std::regex_replace(m, std::regex("\n"), " | ") + "]\n";
    return out;
  }

 private:
  void read() {
    char buf[4096];
    while (!stop_) {
      pollfd pfd{fd_, POLLIN, 0};
      if (::poll(&pfd, 1, 50) <= 0) continue;
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) continue;
      std::lock_guard lock(mu_);
      messages_.emplace_back(buf, size_t(n));
    }
  }

  fs::path dir_;
  fs::path path_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::vector<std::string> messages_;  // GUARDED_BY(mu_)
  std::thread reader_;
};

fs::path socketActivate() { return buildDir() / "tests" / "integration" / "tensord_socket_activate"; }

std::string activationAddress(const std::string& log) {
  std::smatch m;
  if (!std::regex_search(log, m, std::regex("activation socket (\\S+)"))) return "";
  return m[1];
}

// Starts a daemon and expects it to fail; returns its log.
std::string failedStart(DaemonOptions options) {
  options.startTimeout = std::chrono::seconds(60);
  try {
    DaemonProcess daemon(std::move(options));
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "tensord started where it should have refused to";
  return "";
}

TEST(IntegrationSystemd, NotifiesReadyStatusWatchdogReloadAndStopping) {
  FakeNotifySocket notify;
  DaemonOptions options;
  // sd_watchdog_enabled() reads WATCHDOG_USEC; the daemon pings at half of it.
  options.env = {
      {"NOTIFY_SOCKET", notify.path().string()}, {"WATCHDOG_USEC", "400000"}, {"WATCHDOG_PID", std::nullopt}};
  DaemonProcess daemon(options);

  const int ready = notify.waitFor("READY=1");
  ASSERT_GE(ready, 0) << notify.dump();
  // READY carries the first STATUS line: the address and an idle daemon.
  const std::string first = notify.messages()[size_t(ready)];
  EXPECT_TRUE(contains(first, "STATUS=" + daemon.address() + ": 0 connections, 0 tensors (0 named)")) << first;

  // The watchdog is fed again and again.
  const int ping = notify.waitFor("WATCHDOG=1");
  ASSERT_GE(ping, 0) << notify.dump();
  EXPECT_GE(notify.waitFor("WATCHDOG=1", size_t(ping) + 1), 0) << notify.dump();

  // STATUS follows the load: a connection and a named tensor show up.
  {
    Client client({.address = daemon.address(), .token = daemon.token()});
    const std::vector<float> data(1024, 1.0f);
    client.upload({1024}, data).save("w");
    EXPECT_GE(notify.waitFor("STATUS=" + daemon.address() + ": 1 connection, 1 tensor (1 named)*"), 0) << notify.dump();
  }
  // ... and goes back when the client leaves (the named tensor stays).
  const int settled = notify.waitFor("STATUS=" + daemon.address() + ": 0 connections, 1 tensor (1 named)*");
  ASSERT_GE(settled, 0) << notify.dump();
  // Nothing changes now, so nothing more is sent: let the daemon's own clock
  // run past a status tick (one a second; six watchdog pings are 1.2 s) and
  // count STATUS lines.
  auto statusLines = [&] {
    size_t n = 0;
    for (const auto& m : notify.messages()) n += contains(m, "STATUS=") ? 1 : 0;
    return n;
  };
  const size_t statusBefore = statusLines();
  int pings = settled;
  for (int i = 0; i < 6 && pings >= 0; ++i) pings = notify.waitFor("WATCHDOG=1", size_t(pings) + 1);
  ASSERT_GE(pings, 0) << notify.dump();
  EXPECT_EQ(statusLines(), statusBefore) << notify.dump();

  const size_t beforeReload = notify.messages().size();
  daemon.signal(SIGHUP);
  const int reloading = notify.waitFor("RELOADING=1", beforeReload);
  ASSERT_GE(reloading, 0) << notify.dump();
  EXPECT_GE(notify.waitFor("READY=1", size_t(reloading) + 1), 0) << notify.dump();

  const size_t beforeStop = notify.messages().size();
  auto status = daemon.stop();
  ASSERT_TRUE(status.has_value()) << daemon.log();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << describeStatus(*status) << "\n" << daemon.log();
  EXPECT_GE(notify.find("STOPPING=1", beforeStop), 0) << notify.dump();
}

TEST(IntegrationSystemd, UsesThePassedListeningSocket) {
  DaemonOptions options;
  options.wrapper = {socketActivate().string(), "127.0.0.1:0"};
  DaemonProcess daemon(options);
  const std::string passed = activationAddress(daemon.log());
  ASSERT_FALSE(passed.empty()) << daemon.log();
  // The daemon serves on the passed socket, not on --listen's 127.0.0.1:0.
  EXPECT_EQ(daemon.address(), passed) << daemon.log();
  EXPECT_TRUE(contains(daemon.log(), "socket passed by systemd")) << daemon.log();

  Client client({.address = passed, .token = daemon.token()});
  auto x = client.upload({4}, std::vector<float>{1, -2, 3, -4});
  EXPECT_EQ(relu(x).toHost(), (std::vector<float>{1, 0, 3, 0}));
  EXPECT_EQ(daemon.stop().value_or(-1), 0) << daemon.log();
}

TEST(IntegrationSystemd, IgnoresSocketsPassedToAnotherProcess) {
  DaemonOptions options;
  options.wrapper = {socketActivate().string(), "--other-pid", "127.0.0.1:0"};
  DaemonProcess daemon(options);
  const std::string passed = activationAddress(daemon.log());
  ASSERT_FALSE(passed.empty()) << daemon.log();
  // LISTEN_PID names someone else: the daemon binds --listen itself.
  EXPECT_NE(daemon.address(), passed) << daemon.log();
  EXPECT_FALSE(contains(daemon.log(), "socket passed by systemd")) << daemon.log();
  Client client({.address = daemon.address(), .token = daemon.token()});
  EXPECT_FALSE(client.whoami().empty());
  EXPECT_EQ(daemon.stop().value_or(-1), 0) << daemon.log();
}

TEST(IntegrationSystemd, RefusesMoreThanOnePassedSocket) {
  DaemonOptions options;
  options.wrapper = {socketActivate().string(), "--sockets", "2", "127.0.0.1:0"};
  const std::string log = failedStart(options);
  EXPECT_TRUE(contains(log, "socket activation: systemd passed 2 sockets; tensord takes exactly one")) << log;
}

TEST(IntegrationSystemd, RefusesAPassedNonLoopbackSocketForPlainTcp) {
  DaemonOptions options;
  options.wrapper = {socketActivate().string(), "0.0.0.0:0"};
  const std::string log = failedStart(options);
  EXPECT_TRUE(contains(log, "socket activation: plain TCP on the non-loopback address 0.0.0.0:")) << log;
  EXPECT_TRUE(contains(log, "allow_remote_plaintext")) << log;
}

TEST(IntegrationSystemd, LogLevelFlagOverridesTheConfig) {
  DaemonOptions options;
  options.logLevel = "info";
  options.args = {"--log-level", "debug"};
  DaemonProcess daemon(options);
  { Client client({.address = daemon.address(), .token = daemon.token()}); }
  // "connection from ..." is logged at debug only.
  EXPECT_TRUE(waitUntil([&] { return contains(daemon.log(), "connection from 127.0.0.1:"); }, std::chrono::seconds(30)))
      << daemon.log();
  EXPECT_EQ(daemon.stop().value_or(-1), 0) << daemon.log();

  const std::string tensord = (buildDir() / "server" / "tensord").string();
  auto bad = runCommand({tensord, "--config", daemon.configPath().string(), "--log-level", "loud", "--check-config"});
  EXPECT_EQ(bad.exitCode, 1) << bad.err;
  EXPECT_TRUE(contains(bad.err, "--log-level: expected one of trace, debug, info, warn, error, got \"loud\""))
      << bad.err;
}

}  // namespace
}  // namespace tensord::testing
