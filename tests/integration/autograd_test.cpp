// Autograd in the client library against a real daemon: the tape, gradient
// accumulation, broadcasting, no_grad, freed graphs, the optimizers, and
// the promise that a whole step is issued without a round trip.

#include <cmath>

#include "tensord/optim.h"
#include "tests/integration/daemon_test.h"

namespace tensord::testing {
namespace {

class AutogradTest : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    client = connect();
  }
  void TearDown() override {
    client.reset();
    DaemonTest::TearDown();
  }
  Tensor leaf(Shape shape, std::vector<float> v) {
    Tensor t = client->upload(std::move(shape), v);
    t.setRequiresGrad();
    return t;
  }
  Tensor call(const char* op, std::vector<Tensor> in, Attrs attrs = {}) { return client->call1(op, std::move(in), std::move(attrs)); }
  std::unique_ptr<Client> client;
};

void expectNear(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-5f) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

TEST_F(AutogradTest, GradientOfATensorUsedTwiceIsTheSumOfBoth) {
  Tensor x = leaf({4}, {1, -2, 0.5f, 3});
  Tensor y = call("add", {call("mul", {x, x}), x});  // x^2 + x
  EXPECT_TRUE(y.requiresGrad());
  y.backward();
  expectNear(x.grad().toHost(), {3, -3, 2, 7});  // 2x + 1
}

TEST_F(AutogradTest, BroadcastGradientIsSummedToTheInputsShape) {
  Tensor a = leaf({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor bias = leaf({3}, {0.5f, -1, 2});
  Tensor y = call("mul", {call("add", {a, bias}), a});  // (a + bias) * a
  y.backward();
  // d/dbias = sum over rows of a; d/da = 2a + bias.
  expectNear(bias.grad().toHost(), {5, 7, 9});
  expectNear(a.grad().toHost(), {2.5f, 3, 8, 8.5f, 9, 14});
}

TEST_F(AutogradTest, GradientsAccumulateAcrossBackwardsUntilCleared) {
  Tensor x = leaf({2}, {1, 2});
  call("mul", {x}, {{"other", 3.0}}).backward();
  call("mul", {x}, {{"other", 3.0}}).backward();
  expectNear(x.grad().toHost(), {6, 6});
  x.setGrad({});
  EXPECT_FALSE(x.grad());
  call("exp", {x}).backward(client->upload({2}, std::vector<float>{1, 0.5f}));
  expectNear(x.grad().toHost(), {std::exp(1.0f), 0.5f * std::exp(2.0f)}, 1e-4f);
}

TEST_F(AutogradTest, NoGradScopesAreNotRecorded) {
  Tensor x = leaf({2}, {1, 2});
  Tensor y;
  {
    NoGrad off;
    EXPECT_FALSE(gradEnabled());
    y = call("exp", {x});
  }
  EXPECT_TRUE(gradEnabled());
  EXPECT_FALSE(y.requiresGrad());
  try {
    y.backward();
    FAIL() << "backward on an unrecorded result must fail";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "does not require grad")) << e.what();
  }
  // Detached tensors are leaves without history.
  Tensor z = call("exp", {x}).detach();
  EXPECT_FALSE(z.requiresGrad());
}

TEST_F(AutogradTest, ASecondBackwardThroughAFreedGraphFailsClearly) {
  Tensor x = leaf({2}, {1, 2});
  Tensor y = call("sin", {x});
  y.backward();
  try {
    y.backward();
    FAIL() << "the graph was freed";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "freed")) << e.what();
  }
  try {
    y.setRequiresGrad(true);
    FAIL() << "a recorded result is not a leaf";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "not a leaf")) << e.what();
  }
}

TEST_F(AutogradTest, AWholeStepIsIssuedWithoutARoundTrip) {
  Tensor w = leaf({8}, std::vector<float>(8, 0.5f));
  Tensor x = client->upload({8}, std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
  optim::SGD opt({w}, {.lr = 0.1});
  CallStats before = client->stats();
  Tensor y = w;
  for (int i = 0; i < 20; ++i) y = call("tanh", {call("mul", {y, x})});
  y.backward();
  opt.step();
  CallStats issued = client->stats();
  EXPECT_EQ(issued.roundTrips, before.roundTrips) << "forward, backward and the step must not wait";
  EXPECT_GT(issued.calls - before.calls, 60u);
  w.toHost();
  EXPECT_EQ(client->stats().roundTrips, before.roundTrips + 1);
}

TEST_F(AutogradTest, SgdStepMatchesTheUpdateRule) {
  Tensor w = leaf({3}, {1, 2, 3});
  optim::SGD opt({w}, {.lr = 0.5, .momentum = 0.9});
  for (int step = 0; step < 2; ++step) {
    opt.zeroGrad();
    call("mul", {w, w}).backward();  // grad 2w
    opt.step();
  }
  // step 1: buf = 2w0, w1 = w0 - 0.5 * 2w0 = 0; step 2: grad 0, buf = 0.9 * 2w0, w2 = -0.9 w0.
  expectNear(w.toHost(), {-0.9f, -1.8f, -2.7f});
}

TEST_F(AutogradTest, AdamWStepMatchesTheUpdateRule) {
  Tensor w = leaf({2}, {1, -2});
  optim::AdamW opt({w}, {.lr = 0.1, .weightDecay = 0.1});
  call("mul", {w}, {{"other", 3.0}}).backward();  // grad 3
  opt.step();
  // Decay first: w * (1 - lr * wd); then the first Adam step moves by lr * m_hat / (sqrt(v_hat) + eps) = lr.
  expectNear(w.toHost(), {1 * 0.99f - 0.1f, -2 * 0.99f - 0.1f}, 1e-5f);
}

TEST_F(AutogradTest, ClipGradNormScalesEveryGradient) {
  Tensor a = leaf({2}, {0, 0}), b = leaf({1}, {0});
  call("mul", {a}, {{"other", 3.0}}).backward();  // grad [3, 3]
  call("mul", {b}, {{"other", 4.0}}).backward();  // grad [4]
  Tensor norm = optim::clipGradNorm({a, b}, 1.0);
  expectNear(norm.toHost(), {std::sqrt(34.0f)}, 1e-4f);
  float scale = 1.0f / (std::sqrt(34.0f) + 1e-6f);
  expectNear(a.grad().toHost(), {3 * scale, 3 * scale}, 1e-5f);
  expectNear(b.grad().toHost(), {4 * scale}, 1e-5f);
}

TEST_F(AutogradTest, AFailedOptimizerStepSurfacesAtTheNextBlockingCall) {
  Tensor w = client->upload({3}, std::vector<float>{1, 2, 3});
  Tensor g = client->upload({2}, std::vector<float>{1, 1});
  EXPECT_TRUE(client->call("sgd_multi", {w, g}, {{"lr", 0.1}, {"step", int64_t(1)}}).empty());
  try {
    w.toHost();
    FAIL() << "the step's error must surface";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "sgd_multi")) << e.what();
  }
  expectNear(w.toHost(), {1, 2, 3});  // unchanged, and the client still works
}

}  // namespace
}  // namespace tensord::testing
