// Every built-in op against a plain CPU reference on random inputs.
// Tolerances: add/sub/mul/neg/relu are exact (one IEEE op per element);
// div 1e-6 relative (Vulkan allows 2.5 ULP); exp/log 1e-5 relative + 1e-6
// absolute (Vulkan allows 3 + 2|x| ULP); sum/mean 1e-5 * terms
// absolute (matmul & co: conformance_linalg_test.cpp), inputs in [-1, 1].

#include <cmath>
#include <functional>

#include "compute/error.h"
#include "compute/template_util.h"
#include "tests/compute/conformance.h"
#include "tests/compute/engine_fixture.h"

namespace tensord::compute::testing {
namespace {

TENSORD_COVERS(foundation, "add", "sub", "mul", "div", "neg", "relu", "exp", "log");

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

// Offset into `shape` (broadcast to `out`) of the element at out-linear index i.
int64_t broadcastOffset(const Shape& shape, const Shape& out, int64_t i) {
  int64_t offset = 0, stride = 1;
  for (size_t k = 0; k < out.size(); ++k) {
    size_t o = out.size() - 1 - k;
    int64_t idx = i % out[o];
    i /= out[o];
    if (k < shape.size()) {
      size_t d = shape.size() - 1 - k;
      if (shape[d] != 1) offset += idx * stride;
      stride *= shape[d];
    }
  }
  return offset;
}

void expectNear(const std::vector<float>& got, const std::vector<float>& want, double absTol, double relTol,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double tol = absTol + relTol * std::abs(want[i]);
    bool ok = std::abs(double(got[i]) - want[i]) <= tol || (std::isnan(got[i]) && std::isnan(want[i]));
    if (!ok && bad++ < 5) ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", want " << want[i];
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements off";
}

// Test names from the shapes: "a_3x1x5_b_4x1"; gtest allows [A-Za-z0-9_] only.

struct BinaryCase {
  Shape a, b;
};

class BinaryOpTest : public EngineTest, public ::testing::WithParamInterface<BinaryCase> {};

TEST_P(BinaryOpTest, MatchesCpuReference) {
  const auto& [sa, sb] = GetParam();
  auto out = *broadcastShapes(sa, sb);
  auto a = randomData(size_t(numel(sa)));
  auto b = randomData(size_t(numel(sb)), 0.5f, 2.0f);  // away from 0 for div
  auto ta = upload(sa, a), tb = upload(sb, b);
  struct Case {
    const char* op;
    std::function<float(float, float)> fn;
    double rel;
  };
  for (const Case& c : {Case{"add", std::plus<float>(), 0}, Case{"sub", std::minus<float>(), 0},
                        Case{"mul", std::multiplies<float>(), 0}, Case{"div", std::divides<float>(), 1e-6}}) {
    auto result = run(c.op, {ta, tb});
    ASSERT_EQ(result[0].desc.shape, out) << c.op;
    std::vector<float> want(size_t(numel(out)));
    for (int64_t i = 0; i < numel(out); ++i) {
      want[i] = c.fn(a[broadcastOffset(sa, out, i)], b[broadcastOffset(sb, out, i)]);
    }
    expectNear(download(result[0]), want, 0, c.rel, std::string(c.op) + " " + shapeStr(sa) + " " + shapeStr(sb));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, BinaryOpTest,
    ::testing::Values(BinaryCase{{1000}, {1000}},               // not a multiple of the workgroup
                      BinaryCase{{3, 1, 5}, {4, 1}},            // both sides broadcast
                      BinaryCase{{2, 3, 4}, {4}},               // trailing vector
                      BinaryCase{{}, {7, 3}},                   // scalar
                      BinaryCase{{1, 1}, {1}},                  // all size-1
                      BinaryCase{{0, 3}, {3}},                  // size-0 dim
                      BinaryCase{{2, 0}, {1, 1}},               // size-0 dim broadcast
                      BinaryCase{{5, 1, 7, 1, 3}, {1, 6, 1, 2, 3}},
                      BinaryCase{{17'000'000}, {1}}),           // > 65535 workgroups of 256
    [](const auto& info) { return "a_" + dimsName(info.param.a) + "_b_" + dimsName(info.param.b); });

struct UnaryCase {
  const char* op;
  std::function<float(float)> fn;
  float lo, hi;
  double abs, rel;
};

class UnaryOpTest : public EngineTest, public ::testing::WithParamInterface<Shape> {};

TEST_P(UnaryOpTest, MatchesCpuReference) {
  const Shape& shape = GetParam();
  for (const UnaryCase& c : {UnaryCase{"neg", std::negate<float>(), -1, 1, 0, 0},
                             UnaryCase{"relu", [](float x) { return x > 0 ? x : 0.0f; }, -1, 1, 0, 0},
                             UnaryCase{"exp", [](float x) { return std::exp(x); }, -4, 4, 1e-6, 1e-5},
                             UnaryCase{"log", [](float x) { return std::log(x); }, 0.01f, 10, 1e-6, 1e-5}}) {
    auto x = randomData(size_t(numel(shape)), c.lo, c.hi);
    auto y = run(c.op, {upload(shape, x)});
    ASSERT_EQ(y[0].desc.shape, shape);
    std::vector<float> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = c.fn(x[i]);
    expectNear(download(y[0]), want, c.abs, c.rel, std::string(c.op) + " " + shapeStr(shape));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, UnaryOpTest,
                         ::testing::Values(Shape{}, Shape{1}, Shape{0}, Shape{3, 0, 2}, Shape{257}, Shape{31, 33},
                                           Shape{16'777'217}),
                         [](const auto& info) { return dimsName(info.param); });

TEST_F(EngineTest, OpErrorsNameOpAndArgument) {
  auto a = upload({2, 3}, randomData(6)), b = upload({4, 5}, randomData(20));
  auto message = [&](const std::string& op, std::vector<TensorView> in,
                     std::vector<std::pair<std::string, AttrValue>> attrs = {}) {
    try {
      run(op, std::move(in), attrs);
    } catch (const ComputeError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message("add", {a, b}),
            "add: inputs 'input' f32[2, 3] and 'other' f32[4, 5] cannot be broadcast together (trailing dims must match or be 1)");
  EXPECT_EQ(message("matmul", {a, b}),
            "matmul: input 'other' has shape [4, 5]; expected dim 0 to be 3 (the last dim of 'input' [2, 3])");
  EXPECT_EQ(message("relu", {a, b}), "relu: expected 1 input(s) (input), got 2");
  EXPECT_EQ(message("sum", {a}, {{"dims", int64_t(1)}}),
            "sum: unknown attribute 'dims'; it takes dim (ints), keepdim (bool)");
  EXPECT_EQ(message("sum", {a}, {{"keepdim", std::string("yes")}}), "sum: attribute 'keepdim' expects bool, got text");
  EXPECT_EQ(message("sum", {a}, {{"dim", int64_t(2)}}),
            "sum: attribute 'dim' is 2; expected a dim in [-2, 1] for a rank-2 input");
}

}  // namespace
}  // namespace tensord::compute::testing
