// examples/ddp.cpp over three real daemons: the loss falls as the
// single-daemon MLP's does, and the replicas end bit-identical.

#include <regex>
#include <sstream>

#include "tests/integration/daemon_cluster.h"
#include "tests/integration/daemon_test.h"
#include "tests/integration/process.h"

namespace tensord::testing {
namespace {

std::vector<double> epochLosses(const std::string& out) {
  std::vector<double> losses;
  std::regex line(R"(epoch (\d+) loss ([0-9.eE+-]+|nan|inf)( .*)?)");
  std::istringstream in(out);
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    if (std::regex_match(l, m, line)) losses.push_back(std::stod(m[2]));
  }
  return losses;
}

TEST(DdpExample, LossFallsAsOnOneDaemonAndReplicasStayIdentical) {
  DaemonCluster cluster(3);
  constexpr int kEpochs = 20;
  auto ddp = runCommand({(buildDir() / "examples" / "example_ddp").string(), "--connect", cluster.membersList(),
                         "--token", cluster.at(0).token(), "--epochs", std::to_string(kEpochs), "--batch", "63"},
                        {}, std::chrono::seconds(240));
  ASSERT_EQ(ddp.exitCode, 0) << "example_ddp failed:\n" << ddp.out << ddp.err << cluster.logs();
  EXPECT_TRUE(contains(ddp.out, "parameters identical on 3 daemons: yes")) << ddp.out;
  std::vector<double> losses = epochLosses(ddp.out);
  ASSERT_EQ(losses.size(), size_t(kEpochs)) << ddp.out;
  EXPECT_LT(losses.back() * 10, losses.front()) << ddp.out;

  // The same model, data and batch on one daemon: the data-parallel run
  // computes the same mean gradients, so its losses follow this one's.
  auto single = runCommand({(buildDir() / "examples" / "example_mlp").string(), "--connect", cluster.at(0).address(),
                            "--token", cluster.at(0).token(), "--epochs", std::to_string(kEpochs), "--batch", "63"},
                           {}, std::chrono::seconds(240));
  ASSERT_EQ(single.exitCode, 0) << single.out << single.err;
  std::vector<double> reference = epochLosses(single.out);
  ASSERT_EQ(reference.size(), size_t(kEpochs)) << single.out;
  for (int e = 0; e < kEpochs; ++e) {
    EXPECT_NEAR(losses[size_t(e)], reference[size_t(e)], 1e-3 + 1e-2 * reference[size_t(e)]) << "epoch " << e + 1;
  }
  EXPECT_EQ(cluster.stopAll(), "");
}

}  // namespace
}  // namespace tensord::testing
