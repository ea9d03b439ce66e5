// tensorctl stat: the daemon's load.

#include <cstdio>
#include <string>

#include "client/commands.h"
#include "client/output.h"
#include "client/progress_bar.h"

namespace tensord::cli {
namespace {

// "850ns", "35.2us", "1.20ms", "2.50s": three significant digits.
std::string humanSeconds(double seconds) {
  char buf[32];
  if (seconds <= 0) return "-";
  if (seconds < 1e-6) {
    std::snprintf(buf, sizeof buf, "%.0fns", seconds * 1e9);
  } else if (seconds < 1e-3) {
    std::snprintf(buf, sizeof buf, "%.3gus", seconds * 1e6);
  } else if (seconds < 1) {
    std::snprintf(buf, sizeof buf, "%.3gms", seconds * 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.3gs", seconds);
  }
  return buf;
}

// "3d 4h 12m", "4h 12m 5s", "12m 5s", "5s".
std::string humanUptime(double seconds) {
  uint64_t s = uint64_t(seconds);
  const uint64_t days = s / 86400, hours = s / 3600 % 24, minutes = s / 60 % 60;
  s %= 60;
  char buf[64];
  if (days > 0) {
    std::snprintf(buf, sizeof buf, "%llud %lluh %llum", (unsigned long long)days, (unsigned long long)hours,
                  (unsigned long long)minutes);
  } else if (hours > 0) {
    std::snprintf(buf, sizeof buf, "%lluh %llum %llus", (unsigned long long)hours, (unsigned long long)minutes,
                  (unsigned long long)s);
  } else if (minutes > 0) {
    std::snprintf(buf, sizeof buf, "%llum %llus", (unsigned long long)minutes, (unsigned long long)s);
  } else {
    std::snprintf(buf, sizeof buf, "%llus", (unsigned long long)s);
  }
  return buf;
}

// "1 session", "3 sessions".
std::string count(uint64_t n, const char* word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

nlohmann::json toJson(const DaemonStats& s) {
  auto principals = nlohmann::json::array();
  for (const auto& p : s.principals) {
    principals.push_back({{"principal", p.principal},
                          {"device_bytes", p.deviceBytes},
                          {"tensors", p.tensors},
                          {"sessions", p.sessions},
                          {"calls", p.calls},
                          {"ops", p.ops},
                          {"bytes_in", p.bytesIn},
                          {"bytes_out", p.bytesOut}});
  }
  auto ops = nlohmann::json::array();
  for (const auto& op : s.ops) {
    ops.push_back({{"op", op.op},
                   {"completed", op.completed},
                   {"failed", op.failed},
                   {"latency_seconds",
                    {{"p50", op.latencyP50}, {"p90", op.latencyP90}, {"p99", op.latencyP99}, {"max", op.latencyMax}}},
                   {"device_seconds", {{"total", op.deviceSeconds}, {"p50", op.deviceP50}, {"p99", op.deviceP99}}}});
  }
  const auto& m = s.memory;
  return {{"version", s.version},
          {"uptime_seconds", s.uptimeSeconds},
          {"device",
           {{"name", s.device.name},
            {"kind", s.device.kind},
            {"driver", s.device.driver},
            {"api_version", s.device.apiVersion},
            {"memory_bytes", s.device.memoryBytes},
            {"timestamps", s.deviceTimestamps}}},
          {"memory",
           {{"live_bytes", m.liveBytes},
            {"reserved_bytes", m.reservedBytes},
            {"cached_bytes", m.cachedBytes},
            {"limit_bytes", m.limitBytes},
            {"tensors", m.tensorCount},
            {"named", m.namedCount}}},
          {"connections", s.connections},
          {"connections_accepted", s.connectionsAccepted},
          {"sessions", s.sessions},
          {"inflight_calls", s.inflightCalls},
          {"queued_jobs", s.queuedJobs},
          {"bytes_in", s.bytesIn},
          {"bytes_out", s.bytesOut},
          {"ops_executed", s.opsExecuted},
          {"metrics_address", s.metricsAddress},
          {"principals", principals},
          {"ops", ops}};
}

}  // namespace

int cmdStat(const Options& options, Connector& connector) {
  DaemonStats s;
  try {
    s = connector.client().daemonStats();
  } catch (const Error& e) {
    if (e.kind() != Error::Kind::kUnimplemented) throw;
    throw Error(e.kind(), "stat: the daemon at " + options.address +
                              " does not offer Session.stats (it is older than this tensorctl): " + e.what());
  }
  if (options.json) {
    printJson(toJson(s));
    return 0;
  }
  const auto& d = s.device;
  const auto& m = s.memory;
  std::printf("tensord %s at %s, up %s\n", s.version.c_str(), options.address.c_str(),
              humanUptime(s.uptimeSeconds).c_str());
  std::printf("device:       %s (%s), Vulkan %s, %s device memory\n", d.name.c_str(), d.kind.c_str(),
              d.apiVersion.c_str(), humanBytes(d.memoryBytes).c_str());
  std::printf("memory:       %s used of %s (%s reserved, %s cached); %s, %llu named\n", humanBytes(m.liveBytes).c_str(),
              humanBytes(m.limitBytes).c_str(), humanBytes(m.reservedBytes).c_str(), humanBytes(m.cachedBytes).c_str(),
              count(m.tensorCount, "tensor").c_str(), (unsigned long long)m.namedCount);
  std::printf("connections:  %llu open (%llu accepted since start), %s\n", (unsigned long long)s.connections,
              (unsigned long long)s.connectionsAccepted, count(s.sessions, "session").c_str());
  std::printf("load:         %s in flight, %s queued on the device, %s executed\n",
              count(s.inflightCalls, "call").c_str(), count(s.queuedJobs, "job").c_str(),
              count(s.opsExecuted, "op").c_str());
  std::printf("transferred:  %s in, %s out\n", humanBytes(s.bytesIn).c_str(), humanBytes(s.bytesOut).c_str());
  std::printf("metrics:      %s\n",
              s.metricsAddress.empty() ? "off" : ("http://" + s.metricsAddress + "/metrics").c_str());

  if (!s.principals.empty()) {
    std::printf("\n");
    std::vector<std::vector<std::string>> rows = {
        {"PRINCIPAL", "DEVICE MEMORY", "TENSORS", "SESSIONS", "CALLS", "OPS", "IN", "OUT"}};
    for (const auto& p : s.principals) {
      rows.push_back({p.principal, humanBytes(p.deviceBytes), std::to_string(p.tensors), std::to_string(p.sessions),
                      std::to_string(p.calls), std::to_string(p.ops), humanBytes(p.bytesIn), humanBytes(p.bytesOut)});
    }
    printTable(rows);
  }
  if (!s.ops.empty()) {
    std::printf("\n");
    std::vector<std::string> header = {"OP", "DONE", "FAILED", "P50", "P90", "P99", "MAX"};
    if (s.deviceTimestamps) {
      for (const char* h : {"DEVICE P50", "DEVICE P99", "DEVICE TOTAL"}) header.emplace_back(h);
    }
    std::vector<std::vector<std::string>> rows = {header};
    for (const auto& op : s.ops) {
      std::vector<std::string> row = {op.op,
                                      std::to_string(op.completed),
                                      std::to_string(op.failed),
                                      humanSeconds(op.latencyP50),
                                      humanSeconds(op.latencyP90),
                                      humanSeconds(op.latencyP99),
                                      humanSeconds(op.latencyMax)};
      if (s.deviceTimestamps) {
        for (double v : {op.deviceP50, op.deviceP99, op.deviceSeconds}) row.push_back(humanSeconds(v));
      }
      rows.push_back(std::move(row));
    }
    printTable(rows);
    std::printf("\nP50..MAX: from a call's arrival to its work's completion%s\n",
                s.deviceTimestamps ? "; DEVICE: time each call added on the device (timestamp queries; calls "
                                     "that ran alongside others count what they ran past them)"
                                   : "; the device has no timestamps, so device time is not measured");
  }
  return 0;
}

}  // namespace tensord::cli
