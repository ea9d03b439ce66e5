#include "acl/policy_json.h"

#include <gtest/gtest.h>

namespace tensord::acl {
namespace {

#define EXPECT_CONTAINS(text, part) \
  do { \
    const std::string t_ = (text); \
    EXPECT_NE(t_.find(part), std::string::npos) << t_; \
  } while (0)

Decision ask(const JsonPolicy& p, std::string_view who, Action action, std::string_view resource,
             std::string_view category = {}) {
  return p.decide(Principal{std::string(who)}, Request{action, resource, category});
}

bool callOk(const JsonPolicy& p, std::string_view who, std::string_view op, std::string_view category) {
  return ask(p, who, Action::kCallOp, op, category).allowed;
}

constexpr const char* kExample = R"({
  // comments are allowed
  "principals": {
    "alice": {"roles": ["trainer"], "quotas": {"device_bytes": 1073741824, "tensor_count": 100,
              "largest_tensor": 268435456, "calls_per_second": 1000, "connections": 4, "inflight_ops": 64}},
    "bob": {"roles": ["viewer"], "rules": ["+add"]},
    "nobody": {}
  },
  "roles": {
    "trainer": {"rules": ["+@elementwise", "+@nn", "-softmax", "+matmul", "~alice/*:rw", "~shared/*:r",
                          "&admin:reload"]},
    "viewer": {"rules": ["~shared/*:r", "~bob/*:rwd", "-~bob/secret*:r"]}
  }
})";

TEST(PolicyJsonTest, CategoriesOpNamesAndLastMatchWins) {
  auto p = JsonPolicy::parse(kExample);
  EXPECT_EQ(p->principalCount(), 3u);
  EXPECT_EQ(p->roleCount(), 2u);
  EXPECT_TRUE(callOk(*p, "alice", "add", "elementwise"));
  EXPECT_TRUE(callOk(*p, "alice", "relu", "nn"));
  // -softmax comes after +@nn: the later rule wins.
  Decision d = ask(*p, "alice", Action::kCallOp, "softmax", "nn");
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, "rule '-softmax' of role 'trainer' denies it");
  EXPECT_TRUE(callOk(*p, "alice", "matmul", "linalg"));
  EXPECT_FALSE(callOk(*p, "alice", "bmm", "linalg"));
  EXPECT_EQ(ask(*p, "alice", Action::kCallOp, "sum", "reduction").reason, "no rule allows it");
  // bob's own rules come after his roles'.
  EXPECT_TRUE(callOk(*p, "bob", "add", "elementwise"));
  EXPECT_FALSE(callOk(*p, "bob", "mul", "elementwise"));
}

TEST(PolicyJsonTest, OrderMatters) {
  auto allowLast = JsonPolicy::parse(R"({"principals": {"a": {"rules": ["-@nn", "+@nn"]}}})");
  auto denyLast = JsonPolicy::parse(R"({"principals": {"a": {"rules": ["+@nn", "-@nn"]}}})");
  EXPECT_TRUE(callOk(*allowLast, "a", "relu", "nn"));
  EXPECT_FALSE(callOk(*denyLast, "a", "relu", "nn"));
  auto all = JsonPolicy::parse(R"({"principals": {"a": {"rules": ["+@all", "-@linalg", "+bmm"]}}})");
  EXPECT_TRUE(callOk(*all, "a", "relu", "nn"));
  EXPECT_FALSE(callOk(*all, "a", "matmul", "linalg"));
  EXPECT_TRUE(callOk(*all, "a", "bmm", "linalg"));
  auto glob = JsonPolicy::parse(R"({"principals": {"a": {"rules": ["+*", "-conv*", "+conv2d"]}}})");
  EXPECT_TRUE(callOk(*glob, "a", "add", "elementwise"));
  EXPECT_FALSE(callOk(*glob, "a", "conv1d", "nn"));
  EXPECT_TRUE(callOk(*glob, "a", "conv2d", "nn"));
}

TEST(PolicyJsonTest, DefaultDeny) {
  auto p = JsonPolicy::parse(kExample);
  // A principal the policy does not name may do nothing.
  for (Action a : {Action::kCallOp, Action::kReadTensor, Action::kWriteTensor, Action::kDeleteTensor,
                   Action::kSaveTensor, Action::kRestoreTensor, Action::kListTensors, Action::kAdminReload,
                   Action::kAdminUsage}) {
    Decision d = ask(*p, "mallory", a, "x", "nn");
    EXPECT_FALSE(d.allowed) << actionName(a);
    EXPECT_EQ(d.reason, "the policy does not name principal 'mallory'");
  }
  // A named principal without rules may do nothing with names or ops.
  EXPECT_FALSE(callOk(*p, "nobody", "add", "elementwise"));
  EXPECT_FALSE(ask(*p, "nobody", Action::kRestoreTensor, "shared/x").allowed);
  EXPECT_FALSE(ask(*p, "nobody", Action::kListTensors, "").allowed);
  EXPECT_FALSE(ask(*p, "nobody", Action::kAdminReload, "").allowed);
  // An empty policy denies everyone everything.
  auto empty = JsonPolicy::parse("{}");
  EXPECT_FALSE(callOk(*empty, "alice", "add", "elementwise"));
}

TEST(PolicyJsonTest, TensorPermissions) {
  auto p = JsonPolicy::parse(kExample);
  EXPECT_TRUE(ask(*p, "alice", Action::kRestoreTensor, "alice/w").allowed);
  EXPECT_TRUE(ask(*p, "alice", Action::kReadTensor, "alice/w").allowed);
  EXPECT_TRUE(ask(*p, "alice", Action::kSaveTensor, "alice/w").allowed);
  EXPECT_TRUE(ask(*p, "alice", Action::kWriteTensor, "alice/w").allowed);
  Decision d = ask(*p, "alice", Action::kDeleteTensor, "alice/w");
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, "no rule grants d on it");
  EXPECT_TRUE(ask(*p, "alice", Action::kRestoreTensor, "shared/x").allowed);
  EXPECT_FALSE(ask(*p, "alice", Action::kSaveTensor, "shared/x").allowed);
  EXPECT_FALSE(ask(*p, "alice", Action::kRestoreTensor, "bob/x").allowed);
  EXPECT_TRUE(ask(*p, "bob", Action::kDeleteTensor, "bob/x").allowed);
  // -~bob/secret*:r takes read back, but not delete.
  d = ask(*p, "bob", Action::kRestoreTensor, "bob/secret1");
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, "rule '-~bob/secret*:r' of role 'viewer' denies it");
  EXPECT_TRUE(ask(*p, "bob", Action::kDeleteTensor, "bob/secret1").allowed);
  // Listing needs some read grant; nobody has none.
  EXPECT_TRUE(ask(*p, "alice", Action::kListTensors, "").allowed);
  // Unnamed tensors (the session's own) need no rule.
  EXPECT_TRUE(ask(*p, "nobody", Action::kWriteTensor, "").allowed);
  EXPECT_TRUE(ask(*p, "nobody", Action::kReadTensor, "#12").allowed);
  EXPECT_FALSE(ask(*p, "nobody", Action::kDeleteTensor, "#12").allowed);
}

TEST(PolicyJsonTest, AdminRights) {
  auto p = JsonPolicy::parse(kExample);
  EXPECT_TRUE(ask(*p, "alice", Action::kAdminReload, "").allowed);
  EXPECT_FALSE(ask(*p, "alice", Action::kAdminUsage, "").allowed);
  EXPECT_FALSE(ask(*p, "bob", Action::kAdminReload, "").allowed);
  auto star = JsonPolicy::parse(R"({"principals": {"root": {"rules": ["&admin:*", "-&admin:usage"]}}})");
  EXPECT_TRUE(ask(*star, "root", Action::kAdminReload, "").allowed);
  EXPECT_FALSE(ask(*star, "root", Action::kAdminUsage, "").allowed);
  // +@all is about ops, not admin rights.
  auto all = JsonPolicy::parse(R"({"principals": {"a": {"rules": ["+@all"]}}})");
  EXPECT_FALSE(ask(*all, "a", Action::kAdminReload, "").allowed);
}

TEST(PolicyJsonTest, FilesRights) {
  auto p = JsonPolicy::parse(
      R"({"principals": {"loader": {"rules": ["&files:load"]}, "both": {"rules": ["&files:*", "-&files:save"]},
                         "admin": {"rules": ["&admin:*", "+@all", "~*:rwd"]}}})");
  EXPECT_TRUE(ask(*p, "loader", Action::kLoadFile, "ckpt/model.safetensors").allowed);
  const Decision denied = ask(*p, "loader", Action::kSaveFile, "out.safetensors");
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.reason, "no rule grants &files:save");
  EXPECT_TRUE(ask(*p, "both", Action::kLoadFile, "x").allowed);
  EXPECT_EQ(ask(*p, "both", Action::kSaveFile, "x").reason, "rule '-&files:save' of principal 'both' denies it");
  // Admin rights, ops and tensor rights grant no file access.
  EXPECT_FALSE(ask(*p, "admin", Action::kLoadFile, "x").allowed);
  EXPECT_FALSE(ask(*p, "admin", Action::kSaveFile, "x").allowed);
  try {
    JsonPolicy::parse(R"({"roles": {"r": {"rules": ["&files:delete"]}}})");
    ADD_FAILURE() << "&files:delete parsed";
  } catch (const PolicyError& e) {
    EXPECT_STREQ(e.what(), "roles.r.rules[0]: unknown files right 'delete' in '&files:delete' (known: load, save, *)");
  }
}

TEST(PolicyJsonTest, GroupRight) {
  auto p = JsonPolicy::parse(
      R"({"principals": {"former": {"rules": ["&group:create"]}, "taken": {"rules": ["&group:*", "-&group:create"]},
                         "admin": {"rules": ["&admin:*", "+@all", "&files:*"]}}})");
  EXPECT_TRUE(ask(*p, "former", Action::kGroupCreate, "g").allowed);
  EXPECT_EQ(ask(*p, "taken", Action::kGroupCreate, "g").reason, "rule '-&group:create' of principal 'taken' denies it");
  // Admin, files and op rights grant no group right.
  EXPECT_EQ(ask(*p, "admin", Action::kGroupCreate, "g").reason, "no rule grants &group:create");
  EXPECT_EQ(actionName(Action::kGroupCreate), "group:create");
  try {
    JsonPolicy::parse(R"({"roles": {"r": {"rules": ["&group:join"]}}})");
    ADD_FAILURE() << "&group:join parsed";
  } catch (const PolicyError& e) {
    EXPECT_STREQ(e.what(), "roles.r.rules[0]: unknown group right 'join' in '&group:join' (known: create, *)");
  }
}

TEST(PolicyJsonTest, ReservedCategoriesParse) {
  auto p = JsonPolicy::parse(
      R"({"principals": {"a": {"rules": ["+@optim", "+@collective", "+@admin", "+@kernel", "+@shape", "+@index",
                                          "+@creation", "+@reduction", "+@linalg"]}}})");
  EXPECT_TRUE(callOk(*p, "a", "reshape", "shape"));
  EXPECT_FALSE(callOk(*p, "a", "relu", "nn"));
}

TEST(PolicyJsonTest, Quotas) {
  auto p = JsonPolicy::parse(kExample);
  auto q = p->quotas("alice");
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->deviceBytes, 1073741824u);
  EXPECT_EQ(q->tensorCount, 100u);
  EXPECT_EQ(q->largestTensor, 268435456u);
  EXPECT_EQ(q->callsPerSecond, 1000u);
  EXPECT_EQ(q->connections, 4u);
  EXPECT_EQ(q->inflightOps, 64u);
  auto none = p->quotas("bob");
  ASSERT_TRUE(none.has_value());
  EXPECT_EQ(*none, Quotas{});
  EXPECT_FALSE(p->quotas("mallory").has_value());
}

std::string errorOf(std::string_view text) {
  try {
    JsonPolicy::parse(text);
  } catch (const PolicyError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(PolicyJsonTest, ErrorsNameTheKeyPath) {
  EXPECT_CONTAINS(errorOf(R"({"roles": {"trainer": {"rules": ["+@nn", "+add", "+@foo"]}}})"), "roles.trainer.rules[2]: unknown category '@foo' (known: @elementwise");
  EXPECT_CONTAINS(errorOf("{"), "policy: invalid JSON: parse error");
  EXPECT_EQ(errorOf("[]"), "policy: expected an object, got []");
  EXPECT_CONTAINS(errorOf(R"({"users": {}})"), "users: unknown key (known keys here: principals, roles)");
  EXPECT_EQ(errorOf(R"({"roles": []})"), "roles: expected an object, got []");
  EXPECT_CONTAINS(errorOf(R"({"roles": {"r": {"rulez": []}}})"), "roles.r.rulez: unknown key");
  EXPECT_EQ(errorOf(R"({"roles": {"r": {"rules": "+@nn"}}})"),
            "roles.r.rules: expected a list of rule strings, got \"+@nn\"");
  EXPECT_EQ(errorOf(R"({"roles": {"r": {"rules": [3]}}})"),
            "roles.r.rules[0]: expected a rule string such as \"+@nn\", got 3");
  EXPECT_EQ(errorOf(R"({"roles": {"r": {"rules": [""]}}})"), "roles.r.rules[0]: empty rule");
  EXPECT_EQ(errorOf(R"({"roles": {"r": {"rules": ["+"]}}})"), "roles.r.rules[0]: rule '+' names nothing after its sign");
  EXPECT_CONTAINS(errorOf(R"({"roles": {"r": {"rules": ["add"]}}})"), "roles.r.rules[0]: rule 'add' must start with + or -");
  EXPECT_CONTAINS(errorOf(R"({"roles": {"r": {"rules": ["@nn"]}}})"), "roles.r.rules[0]: category rule '@nn' needs a sign");
  EXPECT_CONTAINS(errorOf(R"({"roles": {"r": {"rules": ["~x/*"]}}})"), "roles.r.rules[0]: tensor rule '~x/*' needs permissions after the last ':'");
  EXPECT_EQ(errorOf(R"({"roles": {"r": {"rules": ["~x/*:rx"]}}})"),
            "roles.r.rules[0]: unknown permission 'x' in tensor rule '~x/*:rx' (expected r, w, d)");
  EXPECT_CONTAINS(errorOf(R"({"roles": {"r": {"rules": ["~x/*:"]}}})"), "roles.r.rules[0]: tensor rule '~x/*:' has no permissions");
  EXPECT_CONTAINS(errorOf(R"({"roles": {"r": {"rules": ["~:r"]}}})"), "has an empty name pattern");
  EXPECT_EQ(errorOf(R"({"roles": {"r": {"rules": ["&admin:shutdown"]}}})"),
            "roles.r.rules[0]: unknown admin right 'shutdown' in '&admin:shutdown' (known: reload, usage, *)");
  EXPECT_CONTAINS(errorOf(R"({"roles": {"r": {"rules": ["&root"]}}})"), "roles.r.rules[0]: admin rule '&root' must read");
  EXPECT_CONTAINS(errorOf(R"({"roles": {"r": {"rules": ["+ad d"]}}})"), "roles.r.rules[0]: op pattern 'ad d'");
  EXPECT_EQ(errorOf(R"({"principals": {"a": {"roles": ["ghost"]}}})"),
            "principals.a.roles[0]: unknown role 'ghost' (not under roles)");
  EXPECT_EQ(errorOf(R"({"principals": {"a": {"roles": "r"}}})"),
            "principals.a.roles: expected a list of role names, got \"r\"");
  EXPECT_CONTAINS(errorOf(R"({"principals": {"a": {"rules": ["+@bogus"]}}})"), "principals.a.rules[0]: unknown category '@bogus'");
  EXPECT_CONTAINS(errorOf(R"({"principals": {"a": {"quotas": {"gpus": 1}}}})"), "principals.a.quotas.gpus: unknown key (known keys here: device_bytes");
  EXPECT_EQ(errorOf(R"({"principals": {"a": {"quotas": {"device_bytes": -1}}}})"),
            "principals.a.quotas.device_bytes: expected a non-negative integer, got -1");
  EXPECT_EQ(errorOf(R"({"principals": {"a": {"quotas": {"connections": "4"}}}})"),
            "principals.a.quotas.connections: expected a non-negative integer, got \"4\"");
  EXPECT_EQ(errorOf(R"({"principals": {"a": []}})"), "principals.a: expected an object, got []");
}

TEST(PolicyJsonTest, LoadFileErrors) {
  EXPECT_THROW(JsonPolicy::loadFile("/nonexistent/policy.json"), PolicyError);
}

TEST(PolicyJsonTest, ExampleFileParses) {
  auto p = JsonPolicy::loadFile(std::string(TENSORD_SOURCE_DIR) + "/config/policy.example.json");
  EXPECT_GT(p->principalCount(), 0u);
}

// Registering kernels needs a rule naming @kernel (+@all is not enough);
// calling one is an op call of category "user".
TEST(PolicyJsonTest, KernelRegistrationAndUserKernels) {
  auto p = JsonPolicy::parse(R"({"principals": {"admin": {"rules": ["+@kernel"]},
                                              "all": {"rules": ["+@all"]},
                                              "user": {"rules": ["+@user"]},
                                              "one": {"rules": ["+user.gelu"]},
                                              "revoked": {"rules": ["+@kernel", "-@kernel"]}}})");
  EXPECT_TRUE(p->decide(Principal{"admin"}, {Action::kManageKernel, "user.gelu", {}}).allowed);
  Decision all = p->decide(Principal{"all"}, {Action::kManageKernel, "user.gelu", {}});
  EXPECT_FALSE(all.allowed);
  EXPECT_EQ(all.reason, "no rule grants @kernel");
  EXPECT_FALSE(p->decide(Principal{"revoked"}, {Action::kManageKernel, "user.gelu", {}}).allowed);
  EXPECT_TRUE(p->decide(Principal{"all"}, {Action::kCallOp, "user.gelu", "user"}).allowed);
  EXPECT_TRUE(p->decide(Principal{"user"}, {Action::kCallOp, "user.gelu", "user"}).allowed);
  EXPECT_FALSE(p->decide(Principal{"user"}, {Action::kCallOp, "relu", "elementwise"}).allowed);
  EXPECT_TRUE(p->decide(Principal{"one"}, {Action::kCallOp, "user.gelu", "user"}).allowed);
  EXPECT_FALSE(p->decide(Principal{"one"}, {Action::kCallOp, "user.other", "user"}).allowed);
  EXPECT_FALSE(p->decide(Principal{"admin"}, {Action::kCallOp, "user.gelu", "user"}).allowed);
  EXPECT_EQ(actionName(Action::kManageKernel), "kernel");
}

TEST(PolicyJsonTest, GlobMatch) {
  EXPECT_TRUE(globMatch("alice/*", "alice/w/b"));
  EXPECT_TRUE(globMatch("*", ""));
  EXPECT_TRUE(globMatch("w?", "w1"));
  EXPECT_FALSE(globMatch("w?", "w12"));
  EXPECT_TRUE(globMatch("[ab]x", "bx"));
  EXPECT_FALSE(globMatch("alice/*", "bob/x"));
}

}  // namespace
}  // namespace tensord::acl
