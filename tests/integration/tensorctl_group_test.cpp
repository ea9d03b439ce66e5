// tensorctl group create / ls / rm and allreduce, broadcast, barrier against
// three real daemons: the group forms on every member from one command, a
// collective runs in place on each member's tensor of that name, errors name
// the member, and exit codes mean what the help says.

#include <nlohmann/json.hpp>

#include "tests/integration/daemon_cluster.h"
#include "tests/integration/daemon_test.h"
#include "tests/integration/process.h"

namespace tensord::testing {
namespace {

class TensorctlGroupTest : public ::testing::Test {
 protected:
  void SetUp() override { cluster_ = std::make_unique<DaemonCluster>(3); }
  void TearDown() override {
    clients_.clear();
    EXPECT_EQ(cluster_->stopAll(), "");
    if (HasFailure()) std::cerr << cluster_->logs();
  }

  // tensorctl --connect MEMBER --token T ARGS...
  CommandResult ctl(size_t member, std::vector<std::string> args) {
    std::vector<std::string> argv = {(buildDir() / "client" / "tensorctl").string(), "--connect",
                                     cluster_->at(member).address(), "--token", cluster_->at(member).token()};
    argv.insert(argv.end(), args.begin(), args.end());
    return runCommand(argv, {{"TENSORD_ADDR", std::nullopt}, {"TENSORD_TOKEN", std::nullopt}, {"HOME", std::nullopt},
                             {"XDG_CONFIG_HOME", std::nullopt}});
  }
  Client& client(size_t member) {
    while (clients_.size() <= member) clients_.push_back(std::make_unique<Client>(cluster_->connect(clients_.size())));
    return *clients_[member];
  }
  // Names `values[r]` as NAME on member r.
  void put(const std::string& name, const std::vector<std::vector<float>>& values) {
    for (size_t r = 0; r < values.size(); ++r) {
      client(r).upload({int64_t(values[r].size())}, values[r]).save(name, true);
    }
  }
  std::vector<float> get(size_t member, const std::string& name) { return client(member).restore(name).toHost(); }

  std::unique_ptr<DaemonCluster> cluster_;
  std::vector<std::unique_ptr<Client>> clients_;
};

std::string describe(const CommandResult& r) {
  return "exit " + std::to_string(r.exitCode) + (r.timedOut ? " (timed out)" : "") + "\nstdout: " + r.out +
         "\nstderr: " + r.err;
}

TEST_F(TensorctlGroupTest, CreateListAllreduceBroadcastBarrierRemove) {
  auto created = ctl(0, {"group", "create", "g", "--members", cluster_->membersList()});
  ASSERT_EQ(created.exitCode, 0) << describe(created);
  EXPECT_TRUE(contains(created.out, "group g formed: 3 members")) << created.out;

  // Every member knows it, with its own rank.
  for (size_t r = 0; r < 3; ++r) {
    auto ls = ctl(r, {"group", "ls", "--json"});
    ASSERT_EQ(ls.exitCode, 0) << describe(ls);
    auto groups = nlohmann::json::parse(ls.out);
    ASSERT_EQ(groups.size(), 1u) << ls.out;
    EXPECT_EQ(groups[0]["name"], "g");
    EXPECT_EQ(groups[0]["rank"], r);
    EXPECT_EQ(groups[0]["size"], 3);
    EXPECT_EQ(groups[0]["members"], nlohmann::json(cluster_->members()));
    EXPECT_EQ(groups[0]["state"], "ready");
  }
  auto table = ctl(1, {"group", "ls"});
  EXPECT_TRUE(contains(table.out, "NAME") && contains(table.out, "ready")) << table.out;

  put("w", {{1, -2, 3}, {10, 20, -30}, {100, 200, 300}});
  put("b", {{1}, {2}, {6}});
  // Issued from member 2: members come from its view of the group.
  auto sum = ctl(2, {"allreduce", "--group", "g", "w", "b"});
  ASSERT_EQ(sum.exitCode, 0) << describe(sum);
  EXPECT_TRUE(contains(sum.out, "allreduce (sum) of w, b on group g: 3 members")) << sum.out;
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(get(r, "w"), (std::vector<float>{111, 218, 273})) << "member " << r;
    EXPECT_EQ(get(r, "b"), (std::vector<float>{9})) << "member " << r;
  }

  put("w", {{1, -2, 3}, {10, 20, -30}, {100, 200, 300}});
  auto mx = ctl(0, {"allreduce", "--group", "g", "w", "--op", "min", "--json"});
  ASSERT_EQ(mx.exitCode, 0) << describe(mx);
  auto report = nlohmann::json::parse(mx.out);
  EXPECT_EQ(report["kind"], "allreduce");
  EXPECT_EQ(report["op"], "min");
  EXPECT_EQ(report["members"].size(), 3u);
  for (const auto& m : report["members"]) EXPECT_EQ(m["ok"], true) << mx.out;
  EXPECT_EQ(get(1, "w"), (std::vector<float>{1, -2, -30}));

  put("w", {{1, -2, 3}, {10, 20, -30}, {100, 200, 300}});
  auto bc = ctl(1, {"broadcast", "--group", "g", "w", "--root", "2"});
  ASSERT_EQ(bc.exitCode, 0) << describe(bc);
  for (size_t r = 0; r < 3; ++r) EXPECT_EQ(get(r, "w"), (std::vector<float>{100, 200, 300})) << "member " << r;

  auto barrier = ctl(0, {"barrier", "--group", "g"});
  EXPECT_EQ(barrier.exitCode, 0) << describe(barrier);

  auto rm = ctl(1, {"group", "rm", "g"});
  ASSERT_EQ(rm.exitCode, 0) << describe(rm);
  EXPECT_TRUE(contains(rm.out, "group g removed from 3 members")) << rm.out;
  for (size_t r = 0; r < 3; ++r) EXPECT_TRUE(client(r).groupList().empty()) << "member " << r;
}

TEST_F(TensorctlGroupTest, ErrorsNameTheMemberAndSetTheExitCode) {
  // No such group on the daemon asked.
  auto none = ctl(0, {"allreduce", "--group", "nope", "w"});
  EXPECT_EQ(none.exitCode, 1) << describe(none);
  EXPECT_TRUE(contains(none.err, "has no group 'nope'")) << none.err;

  // A member nobody listens on: cannot connect (exit 3), naming it.
  std::string dead = "127.0.0.1:1";
  auto unreachable = ctl(0, {"group", "create", "g", "--members", cluster_->at(0).address() + "," + dead});
  EXPECT_EQ(unreachable.exitCode, 3) << describe(unreachable);
  EXPECT_TRUE(contains(unreachable.err, "member 1 (" + dead + ")")) << unreachable.err;

  ASSERT_EQ(ctl(0, {"group", "create", "g", "--members", cluster_->membersList()}).exitCode, 0);
  // A name that only some members hold: those without fail, naming themselves.
  put("only01", {{1, 2}, {3, 4}});
  auto partial = ctl(0, {"allreduce", "--group", "g", "only01", "--timeout", "3000"});
  EXPECT_EQ(partial.exitCode, 1) << describe(partial);
  EXPECT_TRUE(contains(partial.err, "member 2 (" + cluster_->at(2).address() + ")")) << partial.err;
  // The tensors of the members that had it are unchanged.
  EXPECT_EQ(get(0, "only01"), (std::vector<float>{1, 2}));
  EXPECT_EQ(get(1, "only01"), (std::vector<float>{3, 4}));

  auto usage = ctl(0, {"broadcast", "--group", "g", "w"});
  EXPECT_EQ(usage.exitCode, 2) << describe(usage);
  EXPECT_TRUE(contains(usage.err, "--root")) << usage.err;
}

}  // namespace
}  // namespace tensord::testing
