#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "server/server_state.h"

namespace tensord::server {
namespace {

// R10 preferred numbers: ten per decade, each about 10^0.1 times the last.
constexpr std::array<const char*, 10> kR10 = {"1", "1.25", "1.6", "2", "2.5", "3.15", "4", "5", "6.3", "8"};
constexpr int kFirstDecade = -6;  // 1 us
constexpr int kDecades = 8;       // up to 100 s

std::array<double, Histogram::kBounds> makeBounds() {
  std::array<double, Histogram::kBounds> bounds{};
  size_t i = 0;
  for (int decade = kFirstDecade; decade < kFirstDecade + kDecades; ++decade) {
    // Parsed from decimal text, so 2.5e-05 is the double nearest 2.5e-05 and
    // prints as such, not as a product's rounding error.
    for (const char* mantissa : kR10) bounds[i++] = std::stod(std::string(mantissa) + "e" + std::to_string(decade));
  }
  bounds[i] = std::stod("1e" + std::to_string(kFirstDecade + kDecades));
  return bounds;
}

// Prometheus label values: backslash, double quote and newline escaped.
std::string escapeLabel(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// Writes metric families: HELP and TYPE once, then samples.
class Exposition {
 public:
  void family(std::string_view name, std::string_view type, std::string_view help) {
    fmt::format_to(std::back_inserter(out_), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  // `labels` is a ready label list without braces ("op=\"add\""), or "".
  void sample(std::string_view name, std::string_view labels, uint64_t value) {
    fmt::format_to(std::back_inserter(out_), "{}{}{}{} {}\n", name, labels.empty() ? "" : "{", labels,
                   labels.empty() ? "" : "}", value);
  }
  void sample(std::string_view name, std::string_view labels, double value) {
    fmt::format_to(std::back_inserter(out_), "{}{}{}{} {}\n", name, labels.empty() ? "" : "{", labels,
                   labels.empty() ? "" : "}", value);
  }
  void histogram(std::string_view name, std::string_view labels, const Histogram& h) {
    const std::string prefix = labels.empty() ? std::string() : std::string(labels) + ",";
    for (double bound : exportedBounds()) {
      sample(std::string(name) + "_bucket", fmt::format("{}le=\"{}\"", prefix, bound), h.cumulative(bound));
    }
    sample(std::string(name) + "_bucket", prefix + "le=\"+Inf\"", h.count());
    sample(std::string(name) + "_sum", labels, h.sum());
    sample(std::string(name) + "_count", labels, h.count());
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

std::string label(std::string_view name, std::string_view value) {
  return fmt::format("{}=\"{}\"", name, escapeLabel(value));
}

// "1.5 GiB"; whole bytes below 1 KiB.
std::string humanBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = double(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", value, kUnits[unit]);
}

std::string plural(uint64_t n, std::string_view word) { return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s"); }

}  // namespace

const std::array<double, Histogram::kBounds>& Histogram::bounds() {
  static const std::array<double, kBounds> bounds = makeBounds();
  return bounds;
}

const std::vector<double>& exportedBounds() {
  static const std::vector<double> exported = [] {
    std::vector<double> out;
    const auto& all = Histogram::bounds();
    for (size_t i = 0; i < all.size(); ++i) {
      const size_t step = i % kR10.size();  // 0: 1, 4: 2.5, 7: 5
      if (step == 0 || step == 4 || step == 7) out.push_back(all[i]);
    }
    return out;
  }();
  return exported;
}

void Histogram::observe(double seconds, uint64_t times) {
  if (!(seconds >= 0)) seconds = 0;  // NaN or a clock step back
  const auto& b = bounds();
  buckets_[size_t(std::lower_bound(b.begin(), b.end(), seconds) - b.begin())] += times;
  count_ += times;
  sum_ += seconds * double(times);
  max_ = std::max(max_, seconds);
}

void Histogram::merge(const Histogram& other) {
  for (size_t i = 0; i < buckets_.size(); ++i) buckets_[i] += other.buckets_[i];
  count_ += other.count_;
  sum_ += other.sum_;
  max_ = std::max(max_, other.max_);
}

uint64_t Histogram::cumulative(double bound) const {
  const auto& b = bounds();
  const size_t last = size_t(std::lower_bound(b.begin(), b.end(), bound) - b.begin());
  uint64_t n = 0;
  for (size_t i = 0; i <= last && i < buckets_.size(); ++i) n += buckets_[i];
  return n;
}

double Histogram::quantile(double q) const {
  if (count_ == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  const double rank = q * double(count_);
  const auto& b = bounds();
  uint64_t below = 0;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    if (buckets_[i] == 0 || double(below + buckets_[i]) < rank) {
      below += buckets_[i];
      continue;
    }
    if (i == kBounds) return max_;  // above the last bound: the largest seen is the best estimate
    const double lower = i == 0 ? 0.0 : b[i - 1];
    const double upper = b[i];
    const double within = (rank - double(below)) / double(buckets_[i]);
    return std::min(lower + (upper - lower) * within, max_);
  }
  return max_;
}

void DeviceTimes::record(std::span<const compute::DeviceTime> times) {
  std::lock_guard lock(mu_);
  for (const auto& t : times) {
    auto it = byOp_.find(t.what);
    if (it == byOp_.end()) it = byOp_.emplace(std::string(t.what), Histogram{}).first;
    it->second.observe(double(t.nanos) * 1e-9);
  }
}

std::map<std::string, Histogram, std::less<>> DeviceTimes::snapshot() const {
  std::lock_guard lock(mu_);
  return byOp_;
}

Metrics::Metrics() : started(std::chrono::steady_clock::now()), startedWall(std::chrono::system_clock::now()) {}

OpMetrics& Metrics::op(std::string_view name) {
  auto it = ops_.find(name);
  if (it == ops_.end()) it = ops_.emplace(std::string(name), OpMetrics{}).first;
  return it->second;
}

PrincipalMetrics& Metrics::principal(std::string_view name) {
  auto it = principals_.find(name);
  if (it == principals_.end()) it = principals_.emplace(std::string(name), PrincipalMetrics{}).first;
  return it->second;
}

StatsSnapshot takeSnapshot(const ServerState& state) {
  const Metrics& m = state.metrics;
  StatsSnapshot s;
  s.uptimeSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - m.started).count();
  s.startTimeSeconds = std::chrono::duration<double>(m.startedWall.time_since_epoch()).count();
  s.deviceInfo = state.engine.device();
  s.memory = state.engine.memoryStats();
  s.tensors = state.registry.liveCount();
  s.namedTensors = state.registry.namedCount();
  s.connections = m.connectionsOpen;
  s.connectionsAccepted = m.connectionsAccepted;
  s.connectionsRefused = m.connectionsRefused;
  for (const auto& [name, count] : state.sessionsByPrincipal) s.sessions += count;
  s.inflightCalls = state.inflightCalls;
  s.queuedJobs = state.engine.queuedJobs();
  s.bytesIn = m.bytesIn;
  s.bytesOut = m.bytesOut;
  s.opsExecuted = state.opsExecuted;
  s.deviceTimestamps = m.deviceTimes != nullptr && state.engine.measuresDeviceTime();
  s.metricsAddress = m.metricsAddress;

  // Principals seen since start, and owners of live tensors (those restored
  // from the state directory may not have connected yet).
  std::map<std::string, StatsSnapshot::Principal, std::less<>> principals;
  for (const auto& [name, usage] : m.principals()) principals[name].usage = usage;
  for (const auto& [owner, count] : state.registry.countsByOwner()) principals[owner].tensors = count;
  for (const auto& [name, count] : state.sessionsByPrincipal) principals[name].sessions = count;
  for (auto& [name, p] : principals) {
    p.name = name;
    p.deviceBytes = state.engine.ownerBytes(name);
    s.principals.push_back(std::move(p));
  }

  for (const auto& [name, op] : m.ops()) {
    s.ops.push_back({.name = name, .completed = op.completed, .failed = op.failed, .latency = op.latency});
  }
  if (s.deviceTimestamps) s.device = m.deviceTimes->snapshot();
  return s;
}

std::string renderPrometheus(const StatsSnapshot& s) {
  Exposition e;
  e.family("tensord_build_info", "gauge", "The running tensord's version and protocol version.");
  e.sample("tensord_build_info",
           label("version", TENSORD_VERSION) + "," + label("protocol", std::to_string(proto::PROTOCOL_VERSION)),
           uint64_t(1));
  e.family("tensord_start_time_seconds", "gauge", "Start time of the daemon, seconds since the Unix epoch.");
  e.sample("tensord_start_time_seconds", "", s.startTimeSeconds);
  e.family("tensord_uptime_seconds", "gauge", "Seconds since the daemon started.");
  e.sample("tensord_uptime_seconds", "", s.uptimeSeconds);

  e.family("tensord_device_info", "gauge", "The Vulkan device the daemon computes on.");
  e.sample("tensord_device_info",
           label("name", s.deviceInfo.name) + "," + label("kind", s.deviceInfo.kind) + "," +
               label("driver", s.deviceInfo.driver) + "," + label("api_version", s.deviceInfo.apiVersion),
           uint64_t(1));
  e.family("tensord_device_memory_total_bytes", "gauge", "Size of the device-local memory heap.");
  e.sample("tensord_device_memory_total_bytes", "", s.deviceInfo.memoryBytes);
  e.family("tensord_device_memory_limit_bytes", "gauge", "Ceiling for tensor memory (limits.memory_limit_bytes).");
  e.sample("tensord_device_memory_limit_bytes", "", s.memory.limitBytes);
  e.family("tensord_device_memory_bytes", "gauge",
           "Device memory: live = held by tensors, reserved = held by the allocator (cache included), cached = "
           "reserved and free for reuse.");
  e.sample("tensord_device_memory_bytes", label("state", "live"), s.memory.liveBytes);
  e.sample("tensord_device_memory_bytes", label("state", "reserved"), s.memory.reservedBytes);
  e.sample("tensord_device_memory_bytes", label("state", "cached"), s.memory.cachedBytes);

  e.family("tensord_tensors", "gauge", "Live tensors, named and unnamed.");
  e.sample("tensord_tensors", "", s.tensors);
  e.family("tensord_named_tensors", "gauge", "Named (persistent) tensors.");
  e.sample("tensord_named_tensors", "", s.namedTensors);

  e.family("tensord_connections", "gauge", "Open client connections, TLS handshakes included.");
  e.sample("tensord_connections", "", s.connections);
  e.family("tensord_connections_accepted_total", "counter", "Client connections accepted.");
  e.sample("tensord_connections_accepted_total", "", s.connectionsAccepted);
  e.family("tensord_connections_refused_total", "counter",
           "Connections closed at accept because limits.max_connections were open.");
  e.sample("tensord_connections_refused_total", "", s.connectionsRefused);
  e.family("tensord_sessions", "gauge", "Open authenticated sessions.");
  e.sample("tensord_sessions", "", s.sessions);
  e.family("tensord_inflight_calls", "gauge", "Requests being served.");
  e.sample("tensord_inflight_calls", "", s.inflightCalls);
  e.family("tensord_queue_depth", "gauge", "Device jobs queued and not yet recorded into a batch.");
  e.sample("tensord_queue_depth", "", s.queuedJobs);
  e.family("tensord_bytes_transferred_total", "counter",
           "Tensor data moved over RPC: in = uploaded, out = downloaded.");
  e.sample("tensord_bytes_transferred_total", label("direction", "in"), s.bytesIn);
  e.sample("tensord_bytes_transferred_total", label("direction", "out"), s.bytesOut);

  e.family("tensord_ops_total", "counter",
           "Op calls by op and result: ok = the work completed, error = refused once the op was known, or failed on "
           "the device.");
  for (const auto& op : s.ops) {
    e.sample("tensord_ops_total", label("op", op.name) + "," + label("result", "ok"), op.completed);
    e.sample("tensord_ops_total", label("op", op.name) + "," + label("result", "error"), op.failed);
  }
  e.family("tensord_op_duration_seconds", "histogram",
           "Seconds from an op call's arrival to the completion of its work on the device, by op.");
  for (const auto& op : s.ops) e.histogram("tensord_op_duration_seconds", label("op", op.name), op.latency);
  if (s.deviceTimestamps) {
    e.family("tensord_op_device_seconds", "histogram",
             "Device time each op added to its batch, from Vulkan timestamp queries, by op (transfers: upload, "
             "download, copy); an op that ran alongside the ones before it counts only what it ran past them.");
    for (const auto& [op, times] : s.device) e.histogram("tensord_op_device_seconds", label("op", op), times);
  }
  e.family("tensord_kernel_dispatches_total", "counter",
           "Dispatches recorded of each built-in kernel variant, by the variant's name: which kernels the ops "
           "took on this device.");
  for (const auto& [kernel, count] : s.kernels)
    e.sample("tensord_kernel_dispatches_total", label("kernel", kernel), count);

  e.family("tensord_principal_device_bytes", "gauge", "Device memory of the live tensors a principal owns.");
  for (const auto& p : s.principals)
    e.sample("tensord_principal_device_bytes", label("principal", p.name), p.deviceBytes);
  e.family("tensord_principal_tensors", "gauge", "Live tensors a principal owns.");
  for (const auto& p : s.principals) e.sample("tensord_principal_tensors", label("principal", p.name), p.tensors);
  e.family("tensord_principal_sessions", "gauge", "Open sessions of a principal.");
  for (const auto& p : s.principals) e.sample("tensord_principal_sessions", label("principal", p.name), p.sessions);
  e.family("tensord_principal_calls_total", "counter", "Requests a principal made.");
  for (const auto& p : s.principals)
    e.sample("tensord_principal_calls_total", label("principal", p.name), p.usage.calls);
  e.family("tensord_principal_ops_total", "counter", "Op calls a principal made.");
  for (const auto& p : s.principals) e.sample("tensord_principal_ops_total", label("principal", p.name), p.usage.ops);
  e.family("tensord_principal_bytes_transferred_total", "counter",
           "Tensor data a principal moved over RPC: in = uploaded, out = downloaded.");
  for (const auto& p : s.principals) {
    e.sample("tensord_principal_bytes_transferred_total", label("principal", p.name) + "," + label("direction", "in"),
             p.usage.bytesIn);
    e.sample("tensord_principal_bytes_transferred_total", label("principal", p.name) + "," + label("direction", "out"),
             p.usage.bytesOut);
  }
  return e.take();
}

std::string statusLine(const ServerState& state) {
  const compute::MemoryStats memory = state.engine.memoryStats();
  return fmt::format("{}, {} ({} named), {} of {} device memory, {} served",
                     plural(state.metrics.connectionsOpen, "connection"), plural(state.registry.liveCount(), "tensor"),
                     state.registry.namedCount(), humanBytes(memory.liveBytes), humanBytes(memory.limitBytes),
                     plural(state.opsExecuted, "op"));
}

}  // namespace tensord::server
