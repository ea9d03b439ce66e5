#pragma once
// The gtest side of the integration tests: a fixture that starts a real
// tensord per test (DaemonProcess), stops it with SIGTERM at the end and
// expects exit status 0, plus small helpers shared by the test files.

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "tensord/client.h"
#include "tests/integration/daemon_process.h"

namespace tensord::testing {

class DaemonTest : public ::testing::Test {
 protected:
  // Override to change the daemon's config for a whole fixture.
  virtual DaemonOptions daemonOptions() { return {}; }

  void SetUp() override { daemon_ = std::make_unique<DaemonProcess>(daemonOptions()); }

  void TearDown() override {
    auto status = daemon_->stop();
    ASSERT_TRUE(status.has_value()) << "tensord did not exit within 60 s of SIGTERM; its log:\n" << daemon_->log();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
        << "tensord ended with " << describeStatus(*status) << " after SIGTERM; its log:\n"
        << daemon_->log();
    if (HasFailure()) std::cerr << "---- tensord log ----\n" << daemon_->log() << "---- end of log ----\n";
  }

  DaemonProcess& daemon() { return *daemon_; }
  ConnectOptions connectOptions() const { return {.address = daemon_->address(), .token = daemon_->token()}; }
  std::unique_ptr<Client> connect() { return std::make_unique<Client>(connectOptions()); }

 private:
  std::unique_ptr<DaemonProcess> daemon_;
};

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The tensord::Error `action` throws, if any.
inline std::optional<Error> errorOf(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e;
  }
  return std::nullopt;
}

// Polls `done` every 20 ms until it returns true or `timeout` passes.
inline bool waitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

inline std::vector<float> randomFloats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(n);
  for (auto& v : out) v = dist(rng);
  return out;
}

inline std::span<const std::byte> asBytes(const std::vector<float>& v) { return std::as_bytes(std::span(v)); }

inline std::vector<float> floatsFromBytes(const std::vector<std::byte>& bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

// Row-major [m, k] @ [k, n] in double; also returns, per element, the sum of
// |a_ik * b_kj| (the scale rounding errors of an f32 dot product grow with).
struct MatmulReference {
  std::vector<double> value;
  std::vector<double> magnitude;
};
inline MatmulReference matmulReference(const std::vector<float>& a, const std::vector<float>& b, int64_t m, int64_t k,
                                       int64_t n) {
  MatmulReference r{std::vector<double>(size_t(m * n)), std::vector<double>(size_t(m * n))};
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t p = 0; p < k; ++p) {
      double av = a[size_t(i * k + p)];
      for (int64_t j = 0; j < n; ++j) {
        double t = av * b[size_t(p * n + j)];
        r.value[size_t(i * n + j)] += t;
        r.magnitude[size_t(i * n + j)] += std::abs(t);
      }
    }
  }
  return r;
}

}  // namespace tensord::testing
