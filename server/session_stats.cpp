// SessionImpl::stats: the daemon's load for `tensorctl stat`.

#include "server/metrics.h"
#include "server/session_impl.h"
#include "server/wire.h"

namespace tensord::server {

kj::Promise<void> SessionImpl::stats(StatsContext context) {
  auto guard = session_->enterCall("stats");
  // Every principal's use is in the answer, not only the caller's.
  session_->authorize(acl::Action::kAdminUsage, "");
  ServerState& server = session_->server();
  const StatsSnapshot s = takeSnapshot(server);

  auto out = context.getResults().initStats();
  out.setVersion(TENSORD_VERSION);
  out.setUptimeSeconds(s.uptimeSeconds);
  fillDeviceInfo(out.initDevice(), server.engine);
  auto memory = out.initMemory();
  memory.setLiveBytes(s.memory.liveBytes);
  memory.setReservedBytes(s.memory.reservedBytes);
  memory.setCachedBytes(s.memory.cachedBytes);
  memory.setLimitBytes(s.memory.limitBytes);
  memory.setTensorCount(s.tensors);
  memory.setNamedCount(s.namedTensors);
  out.setConnections(s.connections);
  out.setConnectionsAccepted(s.connectionsAccepted);
  out.setSessions(s.sessions);
  out.setInflightCalls(s.inflightCalls);
  out.setQueuedJobs(s.queuedJobs);
  out.setBytesIn(s.bytesIn);
  out.setBytesOut(s.bytesOut);
  out.setOpsExecuted(s.opsExecuted);
  out.setDeviceTimestamps(s.deviceTimestamps);
  out.setMetricsAddress(s.metricsAddress);

  auto principals = out.initPrincipals(capnp::uint(s.principals.size()));
  for (size_t i = 0; i < s.principals.size(); ++i) {
    const auto& p = s.principals[i];
    auto w = principals[capnp::uint(i)];
    w.setPrincipal(p.name);
    w.setDeviceBytes(p.deviceBytes);
    w.setTensors(p.tensors);
    w.setSessions(p.sessions);
    w.setCalls(p.usage.calls);
    w.setOps(p.usage.ops);
    w.setBytesIn(p.usage.bytesIn);
    w.setBytesOut(p.usage.bytesOut);
  }

  auto ops = out.initOps(capnp::uint(s.ops.size()));
  for (size_t i = 0; i < s.ops.size(); ++i) {
    const auto& op = s.ops[i];
    auto w = ops[capnp::uint(i)];
    w.setOp(op.name);
    w.setCompleted(op.completed);
    w.setFailed(op.failed);
    w.setLatencyP50(op.latency.quantile(0.5));
    w.setLatencyP90(op.latency.quantile(0.9));
    w.setLatencyP99(op.latency.quantile(0.99));
    w.setLatencyMax(op.latency.max());
    if (auto it = s.device.find(op.name); it != s.device.end()) {
      w.setDeviceSeconds(it->second.sum());
      w.setDeviceP50(it->second.quantile(0.5));
      w.setDeviceP99(it->second.quantile(0.99));
    }
  }
  return kj::READY_NOW;
}

}  // namespace tensord::server
