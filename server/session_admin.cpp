// SessionImpl::adminReload and SessionImpl::status.

#include <spdlog/spdlog.h>

#include <optional>
#include <vector>

#include "acl/policy_json.h"
#include "server/access.h"
#include "server/session_impl.h"
#include "server/wire.h"

namespace tensord::server {

kj::Promise<void> SessionImpl::adminReload(AdminReloadContext context) {
  auto guard = session_->enterCall("adminReload");
  session_->authorize(acl::Action::kAdminReload, "");
  ServerState& server = session_->server();
  if (server.configPath.empty()) kj::throwFatalException(failed("admin reload: the daemon has no config file to re-read"));
  const std::string& who = session_->principal.name;
  try {
    AccessReload fresh = loadAccess(server.configPath);
    server.tokens = std::move(fresh.tokens);
    server.authorizer.setPolicy(std::move(fresh.policy));
    server.log.info("{} (admin reload by '{}')", fresh.description, who);
  } catch (const std::exception& e) {
    server.log.error("reload of {} failed (admin reload by '{}'), keeping the previous tokens and policy: {}",
                     server.configPath.string(), who, e.what());
    kj::throwFatalException(failed("admin reload: " + server.configPath.string() +
                                   " not reloaded, the previous tokens and policy stay: " + e.what()));
  }
  return kj::READY_NOW;
}

kj::Promise<void> SessionImpl::status(StatusContext context) {
  auto guard = session_->enterCall("status");
  ServerState& server = session_->server();
  const std::string& name = session_->principal.name;
  auto results = context.getResults();
  results.setPrincipal(name);

  const auto policy = server.authorizer.current();
  const auto* json = dynamic_cast<const acl::JsonPolicy*>(policy.get());
  const std::vector<std::string> roles = json ? json->roles(name) : std::vector<std::string>{};
  auto roleList = results.initRoles(capnp::uint(roles.size()));
  for (size_t i = 0; i < roles.size(); ++i) roleList.set(capnp::uint(i), roles[i]);

  struct Use {
    const char* name;
    std::optional<uint64_t> limit;
    uint64_t used;
  };
  std::vector<Use> uses;
  if (json) {
    if (auto q = json->quotas(name)) {
      auto sessions = server.sessionsByPrincipal.find(name);
      uses = {
          {"device_bytes", q->deviceBytes, q->deviceBytes ? server.engine.ownerBytes(name) : 0},
          {"tensor_count", q->tensorCount, q->tensorCount ? server.registry.ownedCount(name) : 0},
          {"largest_tensor", q->largestTensor, 0},
          {"calls_per_second", q->callsPerSecond, 0},
          {"connections", q->connections, sessions == server.sessionsByPrincipal.end() ? 0 : sessions->second},
          {"inflight_ops", q->inflightOps, 0},
      };
    }
  }
  size_t count = 0;
  for (const auto& u : uses) count += u.limit ? 1 : 0;
  auto list = results.initQuotas(capnp::uint(count));
  capnp::uint i = 0;
  for (const auto& u : uses) {
    if (!u.limit) continue;
    list[i].setName(u.name);
    list[i].setLimit(*u.limit);
    list[i].setUsed(u.used);
    ++i;
  }
  return kj::READY_NOW;
}

}  // namespace tensord::server
