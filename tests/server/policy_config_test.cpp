// policy_file and audit_log: parsing, path resolution, loading and the audit logger.

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "acl/policy_json.h"
#include "acl/token_authenticator.h"
#include "server/access.h"
#include "server/config.h"

namespace tensord::server {
namespace {

namespace fs = std::filesystem;

std::string withAuth(const std::string& fields) {
  return "{" + fields + R"(, "auth": {"tokens": [{"principal": "p", "token_sha256": ")" + acl::sha256Hex("s") +
         R"("}]}})";
}

std::string configError(const std::string& text) {
  try {
    parseConfig(text);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

fs::path tempDir() {
  std::string tmpl = (fs::temp_directory_path() / "tensord-pc-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp");
  return tmpl;
}

TEST(PolicyConfigTest, KeysParseAndResolveAgainstTheConfigDirectory) {
  Config c = parseConfig(withAuth(R"("policy_file": "policy.json", "audit_log": "/var/log/tensord/audit.log")"));
  EXPECT_EQ(c.policyFile, "policy.json");
  resolvePolicyPaths(c, "/etc/tensord");
  EXPECT_EQ(c.policyFile, "/etc/tensord/policy.json");
  EXPECT_EQ(c.auditLog, "/var/log/tensord/audit.log");
  Config none = parseConfig(withAuth(R"("log_level": "info")"));
  EXPECT_TRUE(none.policyFile.empty());
  EXPECT_TRUE(none.auditLog.empty());
}

TEST(PolicyConfigTest, ErrorsNameTheKey) {
  EXPECT_EQ(configError(withAuth(R"("policy_file": 3)")), "policy_file: expected a string, got 3");
  EXPECT_EQ(configError(withAuth(R"("policy_file": "")")).rfind("policy_file: must not be empty", 0), 0u);
  EXPECT_EQ(configError(withAuth(R"("audit_log": "")")).rfind("audit_log: must not be empty", 0), 0u);
}

TEST(PolicyConfigTest, NoPolicyFileMeansPermissive) {
  Config c;
  auto policy = loadPolicy(c);
  EXPECT_NE(dynamic_cast<const acl::PermissivePolicy*>(policy.get()), nullptr);
  EXPECT_EQ(describePolicy(c, *policy), "no policy_file configured: every authenticated principal may do everything");
}

TEST(PolicyConfigTest, BadPolicyFileNamesFileAndKeyPath) {
  const fs::path dir = tempDir();
  Config c;
  c.policyFile = dir / "policy.json";
  std::ofstream(c.policyFile) << R"({"roles": {"trainer": {"rules": ["+@nn", "+add", "+@foo"]}}})";
  try {
    loadPolicy(c);
    ADD_FAILURE() << "no error";
  } catch (const acl::PolicyError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(c.policyFile.string() + ": roles.trainer.rules[2]: unknown category '@foo'", 0),
              0u)
        << e.what();
  }
  std::ofstream(c.policyFile) << R"({"principals": {"a": {"rules": ["+@nn"]}}})";
  auto policy = loadPolicy(c);
  EXPECT_NE(describePolicy(c, *policy).find("1 principal(s), 0 role(s)"), std::string::npos);
  fs::remove_all(dir);
}

TEST(PolicyConfigTest, AuditLoggerWritesItsOwnFileOrSharesTheMainSinks) {
  const fs::path dir = tempDir();
  std::ostringstream mainOut;
  auto mainLog = std::make_shared<spdlog::logger>("tensord", std::make_shared<spdlog::sinks::ostream_sink_mt>(mainOut));
  Config c;
  auto shared = makeAuditLogger(c, mainLog);
  EXPECT_EQ(shared->name(), "audit");
  shared->warn("audit principal=x");
  shared->flush();
  EXPECT_NE(mainOut.str().find("audit principal=x"), std::string::npos);

  c.auditLog = dir / "audit.log";
  auto file = makeAuditLogger(c, mainLog);
  file->warn("audit principal=y");
  file->flush();
  std::ifstream in(c.auditLog);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "audit principal=y");

  c.auditLog = dir / "missing-dir" / "sub" / "audit.log";
  fs::create_directories(dir / "missing-dir");
  fs::permissions(dir / "missing-dir", fs::perms::owner_read);
  if (::geteuid() != 0) {
    EXPECT_THROW(makeAuditLogger(c, mainLog), std::runtime_error);
  }
  fs::permissions(dir / "missing-dir", fs::perms::owner_all);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tensord::server
