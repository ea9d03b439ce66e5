#pragma once
// The daemon's counters: per op, per principal and overall, for
// Session.stats (`tensorctl stat`) and the Prometheus endpoint.
//
// Threads: Metrics and its parts are touched on the event-loop thread only
// (plain integers, no locks on the request path), except DeviceTimes, which
// the engine's completion thread fills once per batch under its own mutex.

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compute/engine.h"

namespace tensord::server {

class ServerState;

// Durations in fixed buckets. The bounds run from 1 us to 100 s on the R10
// preferred-number series (1, 1.25, 1.6, 2, 2.5, 3.15, 4, 5, 6.3, 8 times a
// power of ten; neighbours 10^0.1 apart), so a quantile read from it is
// within about 12% of the truth, and its 1-2.5-5 subset makes the
// conventional Prometheus buckets exactly. Observing is a binary search and
// an increment.
class Histogram {
 public:
  static constexpr size_t kBounds = 81;                // 8 decades of 10, then 100 s
  static const std::array<double, kBounds>& bounds();  // upper bounds, seconds, ascending

  void observe(double seconds, uint64_t times = 1);  // `times` observations of `seconds`
  void merge(const Histogram& other);

  uint64_t count() const { return count_; }
  double sum() const { return sum_; }
  double max() const { return max_; }
  // Observations in (bounds()[i-1], bounds()[i]]; i == kBounds: above the last bound.
  uint64_t bucket(size_t i) const { return buckets_[i]; }
  // Observations <= bound, for a bound that is one of bounds().
  uint64_t cumulative(double bound) const;
  // The q-quantile (0 <= q <= 1), interpolated linearly inside its bucket
  // as Prometheus' histogram_quantile does, and never above max(); 0 when
  // empty.
  double quantile(double q) const;

 private:
  std::array<uint64_t, kBounds + 1> buckets_{};
  uint64_t count_ = 0;
  double sum_ = 0;
  double max_ = 0;
};

// The bounds of Histogram that Prometheus sees: 1, 2.5 and 5 times each
// power of ten from 1 us to 100 s.
const std::vector<double>& exportedBounds();

struct OpMetrics {
  uint64_t completed = 0;  // work finished (views: when made)
  uint64_t failed = 0;     // refused once the op was known, or failed on the device
  Histogram latency;       // arrival of the call to completion of its work
};

struct PrincipalMetrics {
  uint64_t calls = 0;  // requests (Session, Tensor, TensorWriter) since start
  uint64_t ops = 0;    // of which op calls
  uint64_t bytesIn = 0;
  uint64_t bytesOut = 0;
};

// Per-op device time measured by the engine (timestamp queries), written by
// its completion thread and read by the loop.
class DeviceTimes {
 public:
  void record(std::span<const compute::DeviceTime> times);
  std::map<std::string, Histogram, std::less<>> snapshot() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, Histogram, std::less<>> byOp_;  // GUARDED_BY(mu_)
};

// Measures one op call from its arrival: succeed() when its work completed;
// destroyed without succeed() (refused, failed on the device, cancelled), it
// counts as failed. Move-only; carried along the call's promises.
class OpMeter {
 public:
  explicit OpMeter(OpMetrics& op) : op_(&op), start_(std::chrono::steady_clock::now()) {}
  OpMeter(OpMeter&& other) noexcept : op_(other.op_), start_(other.start_) { other.op_ = nullptr; }
  OpMeter& operator=(OpMeter&&) = delete;
  ~OpMeter() {
    if (op_ != nullptr) ++op_->failed;
  }

  void succeed() {
    if (op_ == nullptr) return;
    ++op_->completed;
    op_->latency.observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
    op_ = nullptr;
  }

 private:
  OpMetrics* op_;
  std::chrono::steady_clock::time_point start_;
};

class Metrics {
 public:
  Metrics();

  // Entries are made on first use and never removed, so references stay
  // valid for the daemon's life (sessions keep theirs).
  OpMetrics& op(std::string_view name);
  PrincipalMetrics& principal(std::string_view name);
  const std::map<std::string, OpMetrics, std::less<>>& ops() const { return ops_; }
  const std::map<std::string, PrincipalMetrics, std::less<>>& principals() const { return principals_; }

  const std::chrono::steady_clock::time_point started;
  const std::chrono::system_clock::time_point startedWall;

  uint64_t connectionsOpen = 0;      // sockets open, TLS handshakes included
  uint64_t connectionsAccepted = 0;  // since start
  uint64_t connectionsRefused = 0;   // closed at accept: limits.max_connections
  uint64_t bytesIn = 0;              // tensor data uploaded
  uint64_t bytesOut = 0;             // tensor data downloaded
  std::string metricsAddress;        // "HOST:PORT" of the Prometheus endpoint; "" when off

  // Filled by the engine's observer (runDaemon makes it before the engine);
  // null: no device times.
  std::shared_ptr<DeviceTimes> deviceTimes;

 private:
  std::map<std::string, OpMetrics, std::less<>> ops_;
  std::map<std::string, PrincipalMetrics, std::less<>> principals_;
};

// Everything stats and /metrics report, read at one moment on the loop.
struct StatsSnapshot {
  struct Principal {
    std::string name;
    uint64_t deviceBytes = 0;
    uint64_t tensors = 0;
    uint64_t sessions = 0;
    PrincipalMetrics usage;
  };
  struct Op {
    std::string name;
    uint64_t completed = 0;
    uint64_t failed = 0;
    Histogram latency;
  };

  double uptimeSeconds = 0;
  double startTimeSeconds = 0;  // Unix time
  compute::DeviceInfo deviceInfo;
  compute::MemoryStats memory;
  uint64_t tensors = 0;
  uint64_t namedTensors = 0;
  uint64_t connections = 0;
  uint64_t connectionsAccepted = 0;
  uint64_t connectionsRefused = 0;
  uint64_t sessions = 0;
  uint64_t inflightCalls = 0;
  uint64_t queuedJobs = 0;
  uint64_t bytesIn = 0;
  uint64_t bytesOut = 0;
  uint64_t opsExecuted = 0;
  bool deviceTimestamps = false;
  std::string metricsAddress;
  std::vector<Principal> principals;  // by name: principals seen since start and owners of live tensors
  std::vector<Op> ops;                // by name: ops called since start
  // Device time by op name, transfers ("upload", "download", "copy")
  // included; empty without timestamps.
  std::map<std::string, Histogram, std::less<>> device;
  // Dispatches of each built-in kernel variant (Engine::kernelDispatches):
  // filled for /metrics only, since Session.stats does not carry them.
  std::map<std::string, uint64_t> kernels;
};

StatsSnapshot takeSnapshot(const ServerState& state);

// The snapshot in the Prometheus text exposition format (version 0.0.4).
std::string renderPrometheus(const StatsSnapshot& stats);

// One line for systemd's STATUS=: "3 connections, 12 tensors (2 named), 1.5 GiB of 80 GiB device memory, 1042 ops".
std::string statusLine(const ServerState& state);

}  // namespace tensord::server
