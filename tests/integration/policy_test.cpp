// The access policy through a real daemon: a permission matrix (one principal
// allowed, one denied, per kind of permission), cross-principal names that
// look missing, the audit log, and SIGHUP reloads of the policy.

#include <signal.h>
#include <stdlib.h>

#include <fstream>
#include <sstream>

#include "tests/integration/policy_daemon_test.h"

namespace tensord::testing {
namespace {

namespace fs = std::filesystem;

// Every principal's token is "<name>-token".
const std::vector<std::string> kPrincipals = {"admin", "alice", "bob", "carol"};

constexpr const char* kPolicy = R"({
  "principals": {
    "admin": {"rules": ["+@all", "~*:rwd"]},
    "alice": {"roles": ["trainer"], "rules": ["~alice/*:rwd"]},
    "bob":   {"rules": ["+@nn", "~bob/*:rwd"]},
    "carol": {"rules": ["+@elementwise"]}
  },
  "roles": {
    "trainer": {"rules": ["+@elementwise", "+matmul", "~shared/*:r"]}
  }
})";


class PolicyTest : public PolicyDaemonTest {
 protected:
  PolicyTest() : PolicyDaemonTest(kPrincipals, kPolicy) {}

  // SIGHUP, then waits for the daemon to log the outcome (`marker`, counted).
  void reload(const std::string& marker) {
    size_t before = count(daemon().log(), marker);
    daemon().signal(SIGHUP);
    ASSERT_TRUE(waitUntil([&] { return count(daemon().log(), marker) > before; }, std::chrono::seconds(20)))
        << daemon().log();
  }

  static size_t count(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  }

  // Admin seeds named tensors.
  void seed(const std::vector<std::string>& names) {
    auto admin = connect();
    for (const auto& name : names) admin->upload(Shape{2, 2}, data_).save(name);
  }

  std::vector<float> data_{1, 2, 3, 4};
};


TEST_F(PolicyTest, DaemonLogsThePolicyInForce) {
  EXPECT_TRUE(contains(daemon().log(), "access policy " + policyPath().string() + ": 4 principal(s), 1 role(s)"))
      << daemon().log();
}

TEST_F(PolicyTest, CallByCategory) {
  auto alice = as("alice");
  auto bob = as("bob");
  auto x = alice->upload(Shape{2, 2}, data_);
  EXPECT_EQ(alice->call1("add", {x, x}).toHost(), (std::vector<float>{2, 4, 6, 8}));
  auto y = bob->upload(Shape{2, 2}, data_);
  const std::string denied = errorOf([&] { bob->call1("add", {y, y}).toHost(); });
  EXPECT_TRUE(contains(denied, "permission denied: principal 'bob' may not call op 'add' (category @elementwise)"))
      << denied;
  // bob's +@nn lets softmax through.
  EXPECT_EQ(bob->call1("softmax", {y}, {{"dim", int64_t(1)}}).toHost().size(), 4u);
  const std::string log = audit();
  EXPECT_TRUE(contains(log, "principal=bob")) << log;
  EXPECT_TRUE(contains(log, "action=call resource=add")) << log;
  EXPECT_FALSE(contains(log, "principal=alice")) << log;
}

TEST_F(PolicyTest, ABatchedCallIsAuthorizedLikeACallAndADenialFailsOnlyIt) {
  auto carol = as("carol");
  auto c = carol->upload(Shape{2, 2}, data_);
  Tensor sum, product, after;
  {
    Batch batch(*carol);
    sum = c + c;                  // @elementwise: allowed
    product = matmul(sum, c);     // @linalg: denied
    after = sum * c;              // allowed, after the denied call
  }
  EXPECT_EQ(sum.toHost(), (std::vector<float>{2, 4, 6, 8}));
  EXPECT_EQ(after.toHost(), (std::vector<float>{2, 8, 18, 32}));
  const std::string denied = errorOf([&] { product.toHost(); });
  EXPECT_TRUE(contains(denied, "permission denied: principal 'carol' may not call op 'matmul' (category @linalg)"))
      << denied;
  EXPECT_TRUE(contains(audit(), "action=call resource=matmul")) << audit();
}

TEST_F(PolicyTest, AGraphIsAuthorizedAtCaptureAndAgainOnceThePolicyChanged) {
  auto alice = as("alice");
  auto carol = as("carol");
  const std::vector<GraphInput> in = {{DType::F32, Shape{2, 2}}};
  auto product = [](const std::vector<Tensor>& x) { return std::vector<Tensor>{matmul(x[0], x[0])}; };
  const std::string denied = errorOf([&] { carol->capture(in, product); });
  EXPECT_TRUE(contains(denied, "graphCreate: call 0 (matmul): permission denied: principal 'carol' may not call op "
                               "'matmul' (category @linalg)"))
      << denied;

  Graph graph = alice->capture(in, product);
  auto a = alice->upload(Shape{2, 2}, data_);
  EXPECT_EQ(graph.run({a})[0].toHost(), (std::vector<float>{7, 10, 15, 22}));
  // The trainer role loses matmul: the next run is refused.
  std::string policy = kPolicy;
  policy.replace(policy.find(R"("+matmul", )"), 11, "");
  writePolicy(policy);
  reload("reloaded ");
  const std::string after = errorOf([&] { graph.run({a})[0].toHost(); });
  EXPECT_TRUE(contains(after, "graph: call 0 (matmul): permission denied: principal 'alice' may not call op 'matmul'"))
      << after;
}

TEST_F(PolicyTest, CallByOpName) {
  auto alice = as("alice");
  auto carol = as("carol");
  auto a = alice->upload(Shape{2, 2}, data_);
  EXPECT_EQ(alice->call1("matmul", {a, a}).toHost(), (std::vector<float>{7, 10, 15, 22}));
  auto c = carol->upload(Shape{2, 2}, data_);
  const std::string denied = errorOf([&] { carol->call1("matmul", {c, c}).toHost(); });
  EXPECT_TRUE(contains(denied, "permission denied: principal 'carol' may not call op 'matmul' (category @linalg)"))
      << denied;
  EXPECT_TRUE(contains(audit(), "principal=carol")) << audit();
  EXPECT_TRUE(contains(audit(), "action=call resource=matmul")) << audit();
}

TEST_F(PolicyTest, ReadAndRestore) {
  seed({"shared/x"});
  auto alice = as("alice");
  auto bob = as("bob");
  // alice may read shared/*: restore and download work, also as an op input.
  auto x = alice->restore("shared/x");
  EXPECT_EQ(x.toHost(), data_);
  EXPECT_EQ(alice->call1("add", {x, x}).toHost(), (std::vector<float>{2, 4, 6, 8}));
  // bob may not: the name looks missing.
  const std::string denied = errorOf([&] { bob->restore("shared/x").toHost(); });
  const std::string missing = errorOf([&] { bob->restore("shared/nothing").toHost(); });
  EXPECT_TRUE(contains(denied, "restore: no tensor named 'shared/x'")) << denied;
  std::string expected = missing;
  expected.replace(expected.find("shared/nothing"), std::string("shared/nothing").size(), "shared/x");
  EXPECT_EQ(denied, expected);
  const std::string log = audit();
  EXPECT_TRUE(contains(log, "principal=bob")) << log;
  EXPECT_TRUE(contains(log, "action=restore resource=shared/x")) << log;
  // A missing name bob may read is no denial, but answers the same.
  const std::string own = errorOf([&] { bob->restore("bob/nothing").toHost(); });
  EXPECT_TRUE(contains(own, "restore: no tensor named 'bob/nothing'")) << own;
  EXPECT_FALSE(contains(audit(), "resource=bob/nothing")) << audit();
}

TEST_F(PolicyTest, WriteSave) {
  auto alice = as("alice");
  auto bob = as("bob");
  alice->upload(Shape{2, 2}, data_).save("alice/w");
  alice->upload(Shape{2, 2}, data_).save("alice/w", /*overwrite=*/true);  // w covers replacing
  const std::string denied = errorOf([&] { bob->upload(Shape{2, 2}, data_).save("alice/evil"); });
  EXPECT_TRUE(contains(denied, "permission denied: principal 'bob' may not save a tensor as 'alice/evil'")) << denied;
  const std::string overwrite = errorOf([&] { bob->upload(Shape{2, 2}, data_).save("alice/w", true); });
  EXPECT_TRUE(contains(overwrite, "permission denied: principal 'bob' may not save a tensor as 'alice/w'")) << overwrite;
  EXPECT_EQ(alice->restore("alice/w").toHost(), data_);
  EXPECT_TRUE(contains(audit(), "action=save resource=alice/evil")) << audit();
}

TEST_F(PolicyTest, DeleteAndCrossPrincipalNamesLookMissing) {
  auto alice = as("alice");
  auto bob = as("bob");
  alice->upload(Shape{2, 2}, data_).save("alice/w");
  alice->upload(Shape{2, 2}, data_).save("alice/v");
  // bob: alice's name and a missing one give the same answer.
  const std::string denied = errorOf([&] { bob->remove("alice/w"); });
  const std::string missing = errorOf([&] { bob->remove("alice/none"); });
  EXPECT_TRUE(contains(denied, "delete: no tensor named 'alice/w'")) << denied;
  std::string expected = missing;
  expected.replace(expected.find("alice/none"), std::string("alice/none").size(), "alice/w");
  EXPECT_EQ(denied, expected);
  const std::string restoreDenied = errorOf([&] { bob->restore("alice/w").toHost(); });
  EXPECT_TRUE(contains(restoreDenied, "restore: no tensor named 'alice/w'")) << restoreDenied;
  // Still there for alice, who may delete it.
  EXPECT_EQ(alice->restore("alice/w").toHost(), data_);
  alice->remove("alice/w");
  EXPECT_TRUE(contains(errorOf([&] { alice->restore("alice/w").toHost(); }), "no tensor named 'alice/w'"));
  const std::string log = audit();
  EXPECT_TRUE(contains(log, "action=delete resource=alice/w")) << log;
  EXPECT_TRUE(contains(log, "action=restore resource=alice/w")) << log;
}

TEST_F(PolicyTest, List) {
  seed({"shared/x", "bob/y"});
  auto alice = as("alice");
  auto carol = as("carol");
  std::vector<std::string> names;
  for (const auto& info : alice->list()) {
    if (!info.name.empty()) names.push_back(info.name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"shared/x"}));  // bob/y is not alice's to see
  const std::string denied = errorOf([&] { carol->list(); });
  EXPECT_TRUE(contains(denied, "permission denied: principal 'carol' may not list tensors")) << denied;
  EXPECT_TRUE(contains(audit(), "principal=carol")) << audit();
  EXPECT_TRUE(contains(audit(), "action=list")) << audit();
}

TEST_F(PolicyTest, ListPagesSkipHiddenNames) {
  // alice may read alice/* and shared/*; bob/* and zeta/* are hidden from
  // her, between and after the names she sees.
  std::vector<std::string> visible = {"alice/a", "alice/b"};
  for (int i = 0; i < 10; ++i) visible.push_back("shared/" + std::to_string(i));
  std::vector<std::string> all = visible;
  for (const char* hidden : {"bob/1", "bob/2", "zeta/1", "zeta/2"}) all.push_back(hidden);
  seed(all);
  auto alice = as("alice");

  auto names = [](const std::vector<TensorInfo>& tensors) {
    std::vector<std::string> out;
    for (const auto& t : tensors) out.push_back(t.name);
    return out;
  };
  // Pages of 3 and 5: full pages of visible names only, in order, and no
  // further (empty) page for the hidden names at the end.
  for (uint32_t limit : {3u, 5u}) {
    std::vector<std::string> joined;
    std::string after;
    size_t pages = 0;
    do {
      TensorPage page = alice->listPage("", after, limit);
      ++pages;
      const std::vector<std::string> got = names(page.tensors);
      joined.insert(joined.end(), got.begin(), got.end());
      if (!page.next.empty()) {
        ASSERT_EQ(got.size(), limit) << "page " << pages;
        EXPECT_EQ(page.next, got.back());
      }
      after = page.next;
    } while (!after.empty() && pages < 20);
    EXPECT_EQ(joined, visible) << "limit " << limit;
    EXPECT_EQ(pages, (visible.size() + limit - 1) / limit) << "limit " << limit;
  }
  EXPECT_EQ(names(alice->list()), visible);
  EXPECT_EQ(names(alice->list("shared/")).size(), 10u);

  // A hidden prefix looks empty, and resuming after a hidden name gives the
  // same page as after a name that does not exist.
  TensorPage bob = alice->listPage("bob/", "", 0);
  EXPECT_TRUE(bob.tensors.empty());
  EXPECT_EQ(bob.next, "");
  TensorPage afterHidden = alice->listPage("", "bob/1", 2);
  TensorPage afterMissing = alice->listPage("", "bob/15", 2);
  EXPECT_EQ(names(afterHidden.tensors), (std::vector<std::string>{"shared/0", "shared/1"}));
  EXPECT_EQ(names(afterHidden.tensors), names(afterMissing.tensors));
  EXPECT_EQ(afterHidden.next, afterMissing.next);
  // The last visible name ends the listing for alice, not for admin.
  EXPECT_EQ(alice->listPage("", "shared/8", 1).next, "");
  auto admin = connect();
  EXPECT_EQ(admin->listPage("", "shared/8", 1).next, "shared/9");
  EXPECT_EQ(admin->list().size(), all.size());
}

TEST_F(PolicyTest, AuthenticationFailureIsAudited) {
  EXPECT_THROW(Client(ConnectOptions{.address = daemon().address(), .token = "wrong-token"}), Error);
  ASSERT_TRUE(waitUntil([&] { return contains(audit(), "action=authenticate"); }, std::chrono::seconds(10)));
  EXPECT_TRUE(contains(audit(), "principal=- peer=127.0.0.1:")) << audit();
  EXPECT_TRUE(contains(audit(), "reason=\"unknown token\"")) << audit();
}

TEST_F(PolicyTest, ReloadAppliesToOpenConnections) {
  seed({"shared/x"});
  auto alice = as("alice");
  auto bob = as("bob");
  auto x = alice->restore("shared/x");
  EXPECT_EQ(x.toHost(), data_);
  auto y = bob->upload(Shape{2, 2}, data_);
  EXPECT_FALSE(errorOf([&] { bob->call1("add", {y, y}).toHost(); }).empty());

  // New rules: bob gets elementwise ops; alice loses shared/* reads.
  std::string policy = kPolicy;
  policy.replace(policy.find(R"("+@nn", )"), 8, R"("+@nn", "+@elementwise", )");
  policy.replace(policy.find(R"(, "~shared/*:r")"), 15, "");
  writePolicy(policy);
  reload("reloaded ");
  EXPECT_EQ(bob->call1("add", {y, y}).toHost(), (std::vector<float>{2, 4, 6, 8}));
  // alice's capability was reached through 'shared/x': reading it now needs r again.
  const std::string denied = errorOf([&] { x.toHost(); });
  EXPECT_TRUE(contains(denied, "permission denied: principal 'alice' may not read tensor 'shared/x'")) << denied;
  EXPECT_TRUE(contains(audit(), "action=read resource=shared/x")) << audit();

  // A broken file: the error is logged with its key path and the rules stay.
  writePolicy(R"({"roles": {"r": {"rules": ["+@nn", "+@bogus"]}}})");
  reload("reload of ");
  EXPECT_TRUE(contains(daemon().log(), "roles.r.rules[1]: unknown category '@bogus'")) << daemon().log();
  EXPECT_TRUE(contains(daemon().log(), "keeping the previous tokens and policy")) << daemon().log();
  EXPECT_EQ(bob->call1("add", {y, y}).toHost(), (std::vector<float>{2, 4, 6, 8}));
  EXPECT_FALSE(errorOf([&] { x.toHost(); }).empty());
}

// A bad policy file at start is a startup error naming the file and key path.
TEST(PolicyStartupTest, BadPolicyFileStopsTheDaemon) {
  std::string tmpl = (fs::temp_directory_path() / "tensord-policy-XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  const fs::path dir = tmpl;
  std::ofstream(dir / "policy.json") << R"({"principals": {"tester": {"rules": ["+@nn", "~x"]}}})";
  DaemonOptions options;
  options.extra = {{"policy_file", (dir / "policy.json").string()}};
  options.startTimeout = std::chrono::seconds(20);
  std::string message;
  try {
    DaemonProcess daemon(options);
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  EXPECT_TRUE(contains(message, (dir / "policy.json").string() + ": principals.tester.rules[1]: tensor rule '~x'"))
      << message;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tensord::testing
