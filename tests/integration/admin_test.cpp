// Session.adminReload and Session.status through a real daemon with a policy:
// reload allowed for an admin, denied (and audited) for anyone else, a broken
// policy file reported by the call while the old rules stay; whoami's roles
// and quota use, through the library and tensorctl.

#include <stdlib.h>

#include <fstream>
#include <sstream>

#include "tests/integration/policy_daemon_test.h"

namespace tensord::testing {
namespace {

namespace fs = std::filesystem;

// Every principal's token is "<name>-token".
const std::vector<std::string> kPrincipals = {"admin", "alice", "bob"};

constexpr const char* kPolicy = R"({
  "principals": {
    "admin": {"rules": ["+@all", "~*:rwd", "&admin:reload"],
              "quotas": {"device_bytes": 1073741824, "tensor_count": 100, "connections": 10}},
    "alice": {"roles": ["trainer"], "rules": ["~alice/*:rwd"], "quotas": {"tensor_count": 5}},
    "bob":   {"rules": ["+@nn"]}
  },
  "roles": {
    "trainer": {"rules": ["+@elementwise", "+matmul", "~shared/*:r"]}
  }
})";

// bob joins the trainers.
constexpr const char* kPolicyBobTrains = R"({
  "principals": {
    "admin": {"rules": ["+@all", "~*:rwd", "&admin:reload"]},
    "alice": {"roles": ["trainer"]},
    "bob":   {"roles": ["trainer"]}
  },
  "roles": {"trainer": {"rules": ["+@elementwise"]}}
})";



class AdminTest : public PolicyDaemonTest {
 protected:
  AdminTest() : PolicyDaemonTest(kPrincipals, kPolicy) {}

  CommandResult ctl(const std::string& principal, std::vector<std::string> args) {
    std::vector<std::string> argv = {(buildDir() / "client" / "tensorctl").string(), "--connect", daemon().address(),
                                     "--token", principal + "-token"};
    argv.insert(argv.end(), args.begin(), args.end());
    return runCommand(argv, {{"TENSORD_ADDR", std::nullopt},
                             {"TENSORD_TOKEN", std::nullopt},
                             {"XDG_CONFIG_HOME", policyDir().string()}});
  }

};

TEST_F(AdminTest, AdminReloadAllowedForAdmin) {
  auto bob = as("bob");
  EXPECT_TRUE(bob->status().roles.empty());
  writePolicy(kPolicyBobTrains);
  auto admin = as("admin");
  EXPECT_EQ(errorOf([&] { admin->adminReload(); }), "");
  // The open session runs under the new policy at once.
  EXPECT_EQ(bob->status().roles, std::vector<std::string>{"trainer"});
  // The daemon's output reaches log() through a pipe: give it a moment.
  EXPECT_TRUE(waitUntil([&] { return contains(daemon().log(), "(admin reload by 'admin')"); }, std::chrono::seconds(10)))
      << daemon().log();

  // The same through tensorctl.
  auto r = ctl("admin", {"admin", "reload"});
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
}

TEST_F(AdminTest, AdminReloadDeniedAndAuditedForNonAdmin) {
  auto bob = as("bob");
  const std::string message = errorOf([&] { bob->adminReload(); });
  EXPECT_TRUE(contains(message, "permission denied")) << message;
  EXPECT_TRUE(contains(message, "admin:reload")) << message;
  const std::string log = audit();
  EXPECT_TRUE(contains(log, "principal=bob")) << log;
  EXPECT_TRUE(contains(log, "action=admin:reload")) << log;

  auto r = ctl("alice", {"admin", "reload"});
  EXPECT_EQ(r.exitCode, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "permission denied")) << r.err;
}

TEST_F(AdminTest, AdminReloadReportsBrokenPolicyAndKeepsOldRules) {
  writePolicy(R"({"principals": {"bob": {"roles": ["nosuchrole"]}}})");
  auto admin = as("admin");
  const std::string message = errorOf([&] { admin->adminReload(); });
  EXPECT_TRUE(contains(message, policyPath().string())) << message;
  EXPECT_TRUE(contains(message, "unknown role 'nosuchrole'")) << message;
  EXPECT_TRUE(contains(message, "previous tokens and policy stay")) << message;
  // The old rules stay: alice is still a trainer, bob still may not reload.
  EXPECT_EQ(as("alice")->status().roles, std::vector<std::string>{"trainer"});
  EXPECT_TRUE(contains(errorOf([&] { as("bob")->adminReload(); }), "permission denied"));

  auto r = ctl("admin", {"admin", "reload"});
  EXPECT_EQ(r.exitCode, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "unknown role 'nosuchrole'")) << r.err;

  // Fixed: the reload goes through.
  writePolicy(kPolicy);
  EXPECT_EQ(errorOf([&] { admin->adminReload(); }), "");
}

TEST_F(AdminTest, WhoamiShowsRolesAndQuotaUse) {
  auto admin = as("admin");
  auto second = as("admin");
  std::vector<float> data(256, 1.0f);
  Tensor t = admin->upload(Shape{16, 16}, data);
  t.save("admin/x");
  SessionStatus s = admin->status();
  EXPECT_EQ(s.principal, "admin");
  EXPECT_TRUE(s.roles.empty());
  std::map<std::string, QuotaUse> byName;
  for (const auto& q : s.quotas) byName[q.name] = q;
  ASSERT_EQ(byName.size(), 3u);
  EXPECT_EQ(byName["device_bytes"].limit, 1073741824u);
  EXPECT_GE(byName["device_bytes"].used, 1024u);
  EXPECT_EQ(byName["tensor_count"].limit, 100u);
  EXPECT_EQ(byName["tensor_count"].used, 1u);
  EXPECT_EQ(byName["connections"].limit, 10u);
  EXPECT_EQ(byName["connections"].used, 2u);

  auto alice = as("alice");
  SessionStatus a = alice->status();
  EXPECT_EQ(a.roles, std::vector<std::string>{"trainer"});
  ASSERT_EQ(a.quotas.size(), 1u);
  EXPECT_EQ(a.quotas[0].name, "tensor_count");
  EXPECT_EQ(a.quotas[0].limit, 5u);
  EXPECT_EQ(a.quotas[0].used, 0u);

  auto json = ctl("alice", {"whoami", "--json"});
  ASSERT_EQ(json.exitCode, 0) << json.out << json.err;
  auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["principal"], "alice");
  EXPECT_EQ(j["roles"], nlohmann::json::array({"trainer"}));
  EXPECT_EQ(j["quotas"][0]["name"], "tensor_count");
  EXPECT_EQ(j["quotas"][0]["limit"], 5);

  auto table = ctl("admin", {"whoami"});
  ASSERT_EQ(table.exitCode, 0) << table.out << table.err;
  EXPECT_TRUE(contains(table.out, "principal:  admin")) << table.out;
  EXPECT_TRUE(contains(table.out, "QUOTA")) << table.out;
  EXPECT_TRUE(contains(table.out, "tensor_count")) << table.out;
  EXPECT_TRUE(contains(table.out, "connections")) << table.out;
}

}  // namespace
}  // namespace tensord::testing
