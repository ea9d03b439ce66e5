#include "acl/authorizer.h"

#include <gtest/gtest.h>

namespace tensord::acl {
namespace {

TEST(AuthorizerTest, DefaultPolicyAllowsEverything) {
  Authorizer authorizer;
  const Principal alice{"alice"};
  for (Action action : {Action::kCallOp, Action::kReadTensor, Action::kWriteTensor, Action::kDeleteTensor,
                        Action::kSaveTensor, Action::kRestoreTensor, Action::kListTensors, Action::kAdminReload,
                        Action::kAdminUsage, Action::kLoadFile, Action::kSaveFile}) {
    Decision d = authorizer.check(alice, {action, "x"});
    EXPECT_TRUE(d.allowed) << actionName(action);
    EXPECT_TRUE(d.reason.empty());
  }
}

// A policy that denies one action, to show the hook carries denials and reasons.
class DenyDeletes final : public Policy {
 public:
  Decision decide(const Principal& principal, const Request& request) const override {
    if (request.action == Action::kDeleteTensor) {
      return Decision::deny("'" + principal.name + "' lacks delete on '" + std::string(request.resource) + "'");
    }
    return Decision::allow();
  }
};

TEST(AuthorizerTest, SwappedPolicyDeniesWithReason) {
  Authorizer authorizer;
  authorizer.setPolicy(std::make_shared<DenyDeletes>());
  Decision d = authorizer.check(Principal{"bob"}, {Action::kDeleteTensor, "weights"});
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, "'bob' lacks delete on 'weights'");
  EXPECT_TRUE(authorizer.check(Principal{"bob"}, {Action::kCallOp, "add", "elementwise"}).allowed);
  authorizer.setPolicy(std::make_shared<PermissivePolicy>());
  EXPECT_TRUE(authorizer.check(Principal{"bob"}, {Action::kDeleteTensor, "weights"}).allowed);
}

TEST(AuthorizerTest, NullPolicyIsRefused) {
  Authorizer authorizer;
  EXPECT_THROW(authorizer.setPolicy(nullptr), std::invalid_argument);
}

TEST(AuthorizerTest, ActionNames) {
  EXPECT_EQ(actionName(Action::kCallOp), "call");
  EXPECT_EQ(actionName(Action::kReadTensor), "read");
  EXPECT_EQ(actionName(Action::kWriteTensor), "write");
  EXPECT_EQ(actionName(Action::kDeleteTensor), "delete");
  EXPECT_EQ(actionName(Action::kSaveTensor), "save");
  EXPECT_EQ(actionName(Action::kRestoreTensor), "restore");
  EXPECT_EQ(actionName(Action::kListTensors), "list");
  EXPECT_EQ(actionName(Action::kAdminReload), "admin:reload");
  EXPECT_EQ(actionName(Action::kAdminUsage), "admin:usage");
  EXPECT_EQ(actionName(Action::kLoadFile), "files:load");
  EXPECT_EQ(actionName(Action::kSaveFile), "files:save");
}

}  // namespace
}  // namespace tensord::acl
