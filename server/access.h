#pragma once
// The access policy and the audit log as the daemon sets them up from its
// config (policy_file, audit_log).

#include <filesystem>
#include <memory>
#include <string>

#include "acl/authorizer.h"
#include "acl/token_authenticator.h"
#include "server/config.h"

namespace spdlog {
class logger;
}

namespace tensord::server {

// config.policyFile (already resolved) as a JsonPolicy, or a PermissivePolicy
// when the config names none. Throws acl::PolicyError whose message names the
// file and the key path ("/etc/tensord/policy.json: roles.x.rules[2]: ...").
std::shared_ptr<const acl::Policy> loadPolicy(const Config& config);

// One line for the log saying which policy is in force.
std::string describePolicy(const Config& config, const acl::Policy& policy);

// The audit logger: config.auditLog (appended to, one line per event, flushed
// at once), or a logger named "audit" sharing `main`'s sinks. Throws
// std::runtime_error naming audit_log when the file cannot be opened.
std::shared_ptr<spdlog::logger> makeAuditLogger(const Config& config, const std::shared_ptr<spdlog::logger>& main);

// The tokens and policy of a config file, read afresh for a reload (SIGHUP,
// Session.adminReload); the caller puts both in force together.
struct AccessReload {
  std::shared_ptr<const acl::TokenAuthenticator> tokens;
  std::shared_ptr<const acl::Policy> policy;
  std::string description;  // the log line: "reloaded /etc/tensord/tensord.json: 2 token(s); ..."
};

// Throws acl::PolicyError ("policy_file /path: key: ...") or another
// std::exception (ConfigError) naming the problem.
AccessReload loadAccess(const std::filesystem::path& configPath);

}  // namespace tensord::server
