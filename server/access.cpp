#include "server/access.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>

#include "acl/policy_json.h"

namespace tensord::server {

std::shared_ptr<const acl::Policy> loadPolicy(const Config& config) {
  if (config.policyFile.empty()) return std::make_shared<acl::PermissivePolicy>();
  try {
    return acl::JsonPolicy::loadFile(config.policyFile);
  } catch (const acl::PolicyError& e) {
    throw acl::PolicyError(config.policyFile.string() + ": " + e.what());
  }
}

std::string describePolicy(const Config& config, const acl::Policy& policy) {
  if (const auto* json = dynamic_cast<const acl::JsonPolicy*>(&policy)) {
    return "access policy " + config.policyFile.string() + ": " + std::to_string(json->principalCount()) +
           " principal(s), " + std::to_string(json->roleCount()) + " role(s); anything no rule allows is denied";
  }
  return "no policy_file configured: every authenticated principal may do everything";
}

std::shared_ptr<spdlog::logger> makeAuditLogger(const Config& config, const std::shared_ptr<spdlog::logger>& main) {
  std::shared_ptr<spdlog::logger> audit;
  if (config.auditLog.empty()) {
    // Same sinks, same format: the lines read "... audit time=... principal=...".
    audit = std::make_shared<spdlog::logger>("audit", main->sinks().begin(), main->sinks().end());
  } else {
    try {
      auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(config.auditLog.string(), /*truncate=*/false);
      audit = std::make_shared<spdlog::logger>("audit", std::move(sink));
      audit->set_pattern("%v");  // each line carries its own time
    } catch (const spdlog::spdlog_ex& e) {
      throw std::runtime_error("audit_log: cannot open " + config.auditLog.string() + ": " + e.what());
    }
  }
  audit->set_level(spdlog::level::info);
  audit->flush_on(spdlog::level::info);
  return audit;
}

AccessReload loadAccess(const std::filesystem::path& configPath) {
  Config fresh = loadConfigFile(configPath);
  resolvePolicyPaths(fresh, configPath.parent_path());
  AccessReload out;
  try {
    out.policy = loadPolicy(fresh);
  } catch (const acl::PolicyError& e) {
    throw acl::PolicyError("policy_file " + std::string(e.what()));
  }
  out.tokens = std::make_shared<const acl::TokenAuthenticator>(fresh.tokens);
  out.description = "reloaded " + configPath.string() + ": " + std::to_string(fresh.tokens.size()) + " token(s); " +
                    describePolicy(fresh, *out.policy) + "; other settings take effect on restart";
  return out;
}

}  // namespace tensord::server
