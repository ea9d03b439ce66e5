#pragma once
// A daemon started with an access policy: every principal in `principals`
// authenticates with the token "<name>-token", the policy file lives in a
// temporary directory the test may rewrite (writePolicy, then SIGHUP or
// admin reload), and the audit log is written next to the config.

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensord/client.h"
#include "tests/integration/daemon_test.h"

namespace tensord::testing {

class PolicyDaemonTest : public DaemonTest {
 protected:
  PolicyDaemonTest(std::vector<std::string> principals, std::string policy)
      : principals_(std::move(principals)), initialPolicy_(std::move(policy)) {}

  // Runs `f`, returns the message of the tensord::Error it throws ("" if none).
  static std::string errorOf(const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  DaemonOptions daemonOptions() override {
    namespace fs = std::filesystem;
    std::string tmpl = (fs::temp_directory_path() / "tensord-policy-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    policyDir_ = tmpl;
    policyPath_ = policyDir_ / "policy.json";
    writePolicy(initialPolicy_);
    DaemonOptions options;
    options.principal = principals_.front();  // the fixture's own client
    options.token = principals_.front() + "-token";
    nlohmann::json tokens = nlohmann::json::array();
    for (const auto& name : principals_) {
      tokens.push_back({{"principal", name}, {"token_sha256", sha256Hex(name + "-token")}});
    }
    options.extra = {{"auth", {{"tokens", tokens}}},
                     {"policy_file", policyPath_.string()},
                     {"audit_log", "audit.log"}};  // relative: next to the config
    return options;
  }

  void TearDown() override {
    DaemonTest::TearDown();
    std::error_code ignored;
    std::filesystem::remove_all(policyDir_, ignored);
  }

  // Replaces the policy file atomically (the daemon reads it on reload).
  void writePolicy(const std::string& text) {
    const auto tmp = policyDir_ / "policy.json.tmp";
    std::ofstream(tmp) << text;
    std::filesystem::rename(tmp, policyPath_);
  }

  std::unique_ptr<Client> as(const std::string& principal) {
    return std::make_unique<Client>(ConnectOptions{.address = daemon().address(), .token = principal + "-token"});
  }

  std::string audit() {
    std::ifstream in(daemon().dir() / "audit.log");
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  const std::filesystem::path& policyPath() const { return policyPath_; }
  const std::filesystem::path& policyDir() const { return policyDir_; }

 private:
  std::vector<std::string> principals_;
  std::string initialPolicy_;
  std::filesystem::path policyDir_;
  std::filesystem::path policyPath_;
};

}  // namespace tensord::testing
