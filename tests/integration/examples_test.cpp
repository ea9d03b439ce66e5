// The training examples train: each runs against a real daemon, its loss
// falls, and every step costs one round trip however many calls it issues.

#include <regex>
#include <sstream>

#include "tests/integration/daemon_test.h"
#include "tests/integration/process.h"

namespace tensord::testing {
namespace {

struct Epoch {
  double loss = 0, callsPerStep = 0, roundTripsPerStep = 0;
};

class ExamplesTest : public DaemonTest {
 protected:
  std::vector<Epoch> train(const std::string& name, int epochs) {
    auto result = runCommand({(buildDir() / "examples" / ("example_" + name)).string(), "--connect",
                              daemon().address(), "--token", daemon().token(), "--epochs", std::to_string(epochs)},
                             {}, std::chrono::seconds(240));
    EXPECT_EQ(result.exitCode, 0) << name << " failed:\n" << result.out << result.err;
    std::vector<Epoch> out;
    std::regex line(R"(epoch (\d+) loss ([0-9.eE+-]+|nan|inf) calls/step ([0-9.]+) round-trips/step ([0-9.]+) ms/step [0-9.]+)");
    std::istringstream in(result.out);
    for (std::string l; std::getline(in, l);) {
      std::smatch m;
      if (std::regex_match(l, m, line)) out.push_back({std::stod(m[2]), std::stod(m[3]), std::stod(m[4])});
    }
    EXPECT_EQ(out.size(), size_t(epochs)) << name << " printed:\n" << result.out << result.err;
    for (const auto& e : out) {
      EXPECT_EQ(e.roundTripsPerStep, 1.0) << name << ": a step must cost one round trip (reading the loss)";
      EXPECT_GE(e.callsPerStep, 8.0) << name;  // forward, backward and optimizer calls, all pipelined
    }
    return out;
  }
};

TEST_F(ExamplesTest, MlpLossFallsTenfold) {
  auto epochs = train("mlp", 30);
  ASSERT_FALSE(epochs.empty());
  EXPECT_LT(epochs.back().loss * 10, epochs.front().loss)
      << "first epoch " << epochs.front().loss << ", last " << epochs.back().loss;
}

TEST_F(ExamplesTest, CnnLossFalls) {
  auto epochs = train("cnn", 12);
  ASSERT_FALSE(epochs.empty());
  EXPECT_LT(epochs.back().loss * 4, epochs.front().loss)
      << "first epoch " << epochs.front().loss << ", last " << epochs.back().loss;
}

TEST_F(ExamplesTest, TransformerLossFalls) {
  auto epochs = train("transformer", 20);
  ASSERT_FALSE(epochs.empty());
  EXPECT_LT(epochs.back().loss * 4, epochs.front().loss)
      << "first epoch " << epochs.front().loss << ", last " << epochs.back().loss;
}

}  // namespace
}  // namespace tensord::testing
