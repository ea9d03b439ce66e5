// Conformance of the elementwise family: every unary, binary and ternary op in
// every dtype it declares, against a double-precision CPU reference over the
// same (rounded) inputs; broadcasting, 0-d and size-0 tensors, scalar
// operands, PyTorch type promotion and the error paths.

#include <cmath>
#include <cstdlib>
#include <functional>
#include <future>
#include <limits>

#include "compute/error.h"
#include "compute/template_fused.h"
#include "compute/template_util.h"
#include "tests/compute/conformance.h"

namespace tensord::compute::testing {
namespace {

using Attr = std::pair<std::string, AttrValue>;
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

enum class Out { kSame, kFloat, kBool };

DType outDType(Out rule, DType in) {
  switch (rule) {
    case Out::kSame: return in;
    case Out::kFloat: return isFloating(in) ? in : DType::F32;
    case Out::kBool: return DType::Bool;
  }
  return in;
}

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double softplus(double x, double beta, double threshold) {
  return x * beta > threshold ? x : std::log1p(std::exp(x * beta)) / beta;
}
double pyMod(double a, double b) {
  double r = std::fmod(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
double erfinvRef(double y) {
  // Newton on erf from a bisection start: exact enough for a reference.
  if (y <= -1) return y == -1 ? -kInf : kNaN;
  if (y >= 1) return y == 1 ? kInf : kNaN;
  double lo = -6, hi = 6;
  for (int i = 0; i < 200; ++i) {
    double mid = (lo + hi) / 2;
    (std::erf(mid) < y ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

struct UnaryCase {
  const char* op;
  std::function<double(double)> f;
  double lo, hi;
  std::vector<DType> dtypes;
  Out out = Out::kSame;
  std::vector<Attr> attrs = {};
  Tolerance tol = {-1, -1};  // f32 override; -1 = the dtype's
};

const std::vector<DType> kF = {DType::F32, DType::F16, DType::BF16};
const std::vector<DType> kFI = {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8};
const std::vector<DType> kAll = {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8, DType::Bool};
const Tolerance kTrig = {2e-5, 1e-4};  // Vulkan's precision for trig/transcendental builtins is loose

std::vector<UnaryCase> unaryCases() {
  auto gelu = [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); };
  return {
      {"abs", [](double x) { return std::abs(x); }, -5, 5, kFI},
      {"neg", [](double x) { return -x; }, -5, 5, {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64}},
      {"sign", [](double x) { return double((x > 0) - (x < 0)); }, -3, 3, kFI},
      {"square", [](double x) { return x * x; }, -5, 5, kFI},
      {"floor", [](double x) { return std::floor(x); }, -5, 5, kFI},
      {"ceil", [](double x) { return std::ceil(x); }, -5, 5, kFI},
      {"round", [](double x) { return std::nearbyint(x); }, -5, 5, kFI},
      {"trunc", [](double x) { return std::trunc(x); }, -5, 5, kFI},
      {"frac", [](double x) { return x - std::trunc(x); }, -5, 5, kF},
      {"relu", [](double x) { return x > 0 ? x : 0; }, -5, 5, kFI},
      {"reciprocal", [](double x) { return 1 / x; }, 0.5, 4, kFI, Out::kFloat},
      {"sqrt", [](double x) { return std::sqrt(x); }, 0, 9, kFI, Out::kFloat},
      {"rsqrt", [](double x) { return 1 / std::sqrt(x); }, 0.1, 9, kFI, Out::kFloat, {}, kTrig},
      {"exp", [](double x) { return std::exp(x); }, -4, 4, kFI, Out::kFloat},
      {"exp2", [](double x) { return std::exp2(x); }, -4, 4, kFI, Out::kFloat},
      {"expm1", [](double x) { return std::expm1(x); }, -2, 2, kFI, Out::kFloat, {}, kTrig},
      {"log", [](double x) { return std::log(x); }, 0.01, 10, kFI, Out::kFloat, {}, kTrig},
      {"log2", [](double x) { return std::log2(x); }, 0.01, 10, kFI, Out::kFloat, {}, kTrig},
      {"log10", [](double x) { return std::log10(x); }, 0.01, 10, kFI, Out::kFloat, {}, kTrig},
      {"log1p", [](double x) { return std::log1p(x); }, -0.5, 5, kFI, Out::kFloat, {}, kTrig},
      {"sin", [](double x) { return std::sin(x); }, -3, 3, kFI, Out::kFloat, {}, kTrig},
      {"cos", [](double x) { return std::cos(x); }, -3, 3, kFI, Out::kFloat, {}, kTrig},
      {"tan", [](double x) { return std::tan(x); }, -1.2, 1.2, kF, Out::kFloat, {}, kTrig},
      {"asin", [](double x) { return std::asin(x); }, -0.95, 0.95, kF, Out::kFloat, {}, kTrig},
      {"acos", [](double x) { return std::acos(x); }, -0.95, 0.95, kF, Out::kFloat, {}, kTrig},
      {"atan", [](double x) { return std::atan(x); }, -5, 5, kFI, Out::kFloat, {}, kTrig},
      {"sinh", [](double x) { return std::sinh(x); }, -3, 3, kFI, Out::kFloat, {}, kTrig},
      {"cosh", [](double x) { return std::cosh(x); }, -3, 3, kFI, Out::kFloat, {}, kTrig},
      {"tanh", [](double x) { return std::tanh(x); }, -3, 3, kFI, Out::kFloat, {}, kTrig},
      {"asinh", [](double x) { return std::asinh(x); }, -5, 5, kFI, Out::kFloat, {}, kTrig},
      {"acosh", [](double x) { return std::acosh(x); }, 1.1, 5, kF, Out::kFloat, {}, kTrig},
      {"atanh", [](double x) { return std::atanh(x); }, -0.9, 0.9, kF, Out::kFloat, {}, kTrig},
      {"erf", [](double x) { return std::erf(x); }, -3, 3, kFI, Out::kFloat, {}, kTrig},
      {"erfc", [](double x) { return std::erfc(x); }, -3, 3, kFI, Out::kFloat, {}, kTrig},
      {"erfinv", erfinvRef, -0.99, 0.99, kF, Out::kFloat, {}, {1e-5, 1e-4}},
      {"sigmoid", sigmoid, -8, 8, kFI, Out::kFloat, {}, kTrig},
      {"logsigmoid", [](double x) { return std::log(sigmoid(x)); }, -8, 8, kFI, Out::kFloat, {}, kTrig},
      {"silu", [](double x) { return x * sigmoid(x); }, -8, 8, kFI, Out::kFloat, {}, kTrig},
      {"mish", [](double x) { return x * std::tanh(softplus(x, 1, 20)); }, -5, 5, kFI, Out::kFloat, {}, kTrig},
      {"softsign", [](double x) { return x / (1 + std::abs(x)); }, -5, 5, kFI, Out::kFloat},
      {"selu", [](double x) { return 1.0507009873554805 * (x > 0 ? x : 1.6732632423543772 * std::expm1(x)); }, -3, 3,
       kFI, Out::kFloat, {}, kTrig},
      {"hardsigmoid", [](double x) { return std::clamp(x / 6 + 0.5, 0.0, 1.0); }, -5, 5, kFI, Out::kFloat},
      {"hardswish", [](double x) { return x * std::clamp(x / 6 + 0.5, 0.0, 1.0); }, -5, 5, kFI, Out::kFloat},
      {"relu6", [](double x) { return std::clamp(x, 0.0, 6.0); }, -3, 9, kF},
      {"leaky_relu", [](double x) { return x >= 0 ? x : 0.2 * x; }, -5, 5, kF, Out::kSame, {{"negative_slope", 0.2}}},
      {"elu", [](double x) { return x > 0 ? x : 1.5 * std::expm1(x); }, -3, 3, kF, Out::kSame, {{"alpha", 1.5}}, kTrig},
      {"celu", [](double x) { return std::max(x, 0.0) + std::min(0.0, 2.0 * std::expm1(x / 2.0)); }, -3, 3, kF,
       Out::kSame, {{"alpha", 2.0}}, kTrig},
      {"softplus", [](double x) { return softplus(x, 2, 5); }, -4, 4, kF, Out::kSame,
       {{"beta", 2.0}, {"threshold", 5.0}}, kTrig},
      {"hardtanh", [](double x) { return std::clamp(x, -0.5, 2.0); }, -3, 3, kF, Out::kSame,
       {{"min_val", -0.5}, {"max_val", 2.0}}},
      {"gelu", gelu, -4, 4, kF, Out::kSame, {}, kTrig},
      {"logit", [](double x) { return std::log(x / (1 - x)); }, 0.05, 0.95, kFI, Out::kFloat, {}, kTrig},
      {"clone", [](double x) { return x; }, -5, 5, kAll},
      {"isnan", [](double) { return 0.0; }, -5, 5, kAll, Out::kBool},
      {"isinf", [](double) { return 0.0; }, -5, 5, kAll, Out::kBool},
      {"isfinite", [](double) { return 1.0; }, -5, 5, kAll, Out::kBool},
      {"logical_not", [](double x) { return x == 0 ? 1.0 : 0.0; }, -2, 2, kAll, Out::kBool},
      {"bitwise_not", [](double x) { return -x - 1; }, -5, 5, {DType::I32, DType::I64}},
      {"nan_to_num", [](double x) { return x; }, -5, 5, kF},
  };
}

class UnaryTest : public ConformanceTest, public ::testing::WithParamInterface<Shape> {};

TEST_P(UnaryTest, EveryUnaryOpInEveryDType) {
  const Shape& shape = GetParam();
  for (const UnaryCase& c : unaryCases()) {
    for (DType dt : c.dtypes) {
      // Ints: integers in range (u8: non-negative); floats: uniform.
      double lo = c.lo, hi = c.hi;
      if (dt == DType::U8) lo = std::max(lo, 0.0);
      if (!isFloating(dt) && std::ceil(lo) > std::floor(hi)) continue;
      HostTensor x = randomTensor(dt, shape, lo, hi);
      if (std::string(c.op) == "reciprocal" || std::string(c.op) == "rsqrt" || std::string(c.op) == "log" ||
          std::string(c.op) == "log2" || std::string(c.op) == "log10") {
        if (!isFloating(dt)) for (auto& v : x.values) v = std::max(v, 1.0);
      }
      auto y = call(c.op, {x}, c.attrs);
      ASSERT_EQ(y.size(), 1u) << c.op;
      DType od = outDType(c.out, dt);
      HostTensor want{od, shape, {}};
      for (double v : x.values) want.values.push_back(roundTo(od, c.f(v)));
      if (std::string(c.op) == "bitwise_not" && dt == DType::Bool) continue;
      Tolerance tol = (dt == DType::F32 || (c.out == Out::kFloat && !isFloating(dt))) && c.tol.atol >= 0
                          ? c.tol
                          : Tolerance{-1, -1};
      expectClose(y[0], want, std::string(c.op) + " " + std::string(dtypeName(dt)) + " " + dimsName(shape), 1, tol);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Elementwise, UnaryTest,
                         // {4, 65}: a whole number of groups of 4, the 4-wide dense loop for floats.
                         ::testing::Values(Shape{}, Shape{0}, Shape{3, 0, 2}, Shape{257}, Shape{31, 33}, Shape{4, 65}),
                         [](const auto& info) { return dimsName(info.param); });

TENSORD_COVERS(unary, "abs", "neg", "sign", "square", "floor", "ceil", "round", "trunc", "frac", "relu", "reciprocal",
               "sqrt", "rsqrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "asin",
               "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc", "erfinv", "sigmoid",
               "logsigmoid", "silu", "mish", "softsign", "selu", "hardsigmoid", "hardswish", "relu6", "leaky_relu",
               "elu", "celu", "softplus", "hardtanh", "gelu", "logit", "clone", "isnan", "isinf", "isfinite",
               "logical_not", "bitwise_not", "nan_to_num");

TEST_F(ConformanceTest, UnarySpecialValues) {
  HostTensor x = makeTensor(DType::F32, {6}, {kNaN, kInf, -kInf, 0.0, -0.0, 2.5});
  auto isnan = call("isnan", {x})[0].values;
  EXPECT_EQ(isnan, (std::vector<double>{1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(call("isinf", {x})[0].values, (std::vector<double>{0, 1, 1, 0, 0, 0}));
  EXPECT_EQ(call("isfinite", {x})[0].values, (std::vector<double>{0, 0, 0, 1, 1, 1}));
  auto fixed = call("nan_to_num", {x}, {{"nan", 7.0}, {"posinf", 100.0}})[0].values;
  EXPECT_EQ(fixed[0], 7.0);
  EXPECT_EQ(fixed[1], 100.0);
  EXPECT_EQ(fixed[2], -double(std::numeric_limits<float>::max()));
  auto half = call("nan_to_num", {makeTensor(DType::F16, {2}, {kInf, -kInf})})[0].values;
  EXPECT_EQ(half, (std::vector<double>{65504, -65504}));
  EXPECT_TRUE(std::isnan(call("relu", {x})[0].values[0])) << "relu keeps NaN, as PyTorch";
  auto relu = call("relu", {x})[0].values;
  EXPECT_EQ(std::vector<double>(relu.begin() + 1, relu.end()), (std::vector<double>{kInf, 0, 0, 0, 2.5}));
  auto relu6 = call("relu6", {x})[0].values;
  EXPECT_TRUE(std::isnan(relu6[0])) << "relu6 keeps NaN, as PyTorch";
  EXPECT_EQ(std::vector<double>(relu6.begin() + 1, relu6.end()), (std::vector<double>{6, 0, 0, 0, 2.5}));
  auto hardtanh = call("hardtanh", {x})[0].values;
  EXPECT_TRUE(std::isnan(hardtanh[0])) << "hardtanh keeps NaN, as PyTorch";
  EXPECT_EQ(std::vector<double>(hardtanh.begin() + 1, hardtanh.end()), (std::vector<double>{1, -1, 0, 0, 1}));
  // gelu's tanh approximation.
  HostTensor g = randomTensor(DType::F32, {100}, -4, 4);
  auto got = call("gelu", {g}, {{"approximate", std::string("tanh")}})[0];
  HostTensor want{DType::F32, {100}, {}};
  for (double v : g.values) want.values.push_back(roundTo(DType::F32, 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)))));
  expectClose(got, want, "gelu tanh", 1, kTrig);
  // Exact gelu's negative tail, x * Phi(x) with Phi(x) down to 1e-23: to a
  // few parts in a million, where 1 + erf(x / sqrt(2)) in f32 would cancel
  // to nothing or to whole multiples of 2^-24.
  const std::vector<double> tail = {-3.5, -5, -6.5, -8, -9.5};
  auto gt = call("gelu", {makeTensor(DType::F32, {int64_t(tail.size())}, tail)})[0].values;
  for (size_t i = 0; i < tail.size(); ++i) {
    const double x = tail[i], exact = 0.5 * x * std::erfc(-x / std::sqrt(2.0));
    EXPECT_NEAR(gt[i], exact, 5e-6 * std::abs(exact)) << "gelu(" << x << ")";
  }
  // logit with eps clamps first.
  auto lg = call("logit", {makeTensor(DType::F32, {2}, {0.0, 1.0})}, {{"eps", 0.25}})[0].values;
  EXPECT_NEAR(lg[0], std::log(0.25 / 0.75), 1e-5);
  EXPECT_NEAR(lg[1], std::log(0.75 / 0.25), 1e-5);
}

// ------------------------------------------------------------------ binary

struct BinaryCase {
  const char* op;
  std::function<double(double, double)> f;
  std::vector<DType> dtypes;
  Out out = Out::kSame;
  double lo = -5, hi = 5, blo = -5, bhi = 5;
  std::vector<Attr> attrs = {};
  Tolerance tol = {-1, -1};
};

std::vector<BinaryCase> binaryCases() {
  const std::vector<DType> bits = {DType::I32, DType::I64, DType::U8, DType::Bool};
  return {
      {"add", [](double a, double b) { return a + b; }, kFI},
      {"sub", [](double a, double b) { return a - b; }, {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64}},
      {"mul", [](double a, double b) { return a * b; }, kAll},
      {"div", [](double a, double b) { return a / b; }, kFI, Out::kFloat, -5, 5, 1, 4},
      {"pow", [](double a, double b) { return std::pow(a, b); }, kF, Out::kSame, 0.1, 3, -2, 2, {}, kTrig},
      {"atan2", [](double a, double b) { return std::atan2(a, b); }, kFI, Out::kFloat, -5, 5, -5, 5, {}, kTrig},
      {"maximum", [](double a, double b) { return std::max(a, b); }, kAll},
      {"minimum", [](double a, double b) { return std::min(a, b); }, kAll},
      {"fmod", [](double a, double b) { return std::fmod(a, b); }, {DType::F32, DType::I32, DType::I64}, Out::kSame,
       -9, 9, 1, 4},
      {"remainder", pyMod, {DType::F32, DType::I32, DType::I64}, Out::kSame, -9, 9, -4, -1},
      {"hypot", [](double a, double b) { return std::hypot(a, b); }, kF, Out::kSame, -5, 5, -5, 5, {}, kTrig},
      {"copysign", [](double a, double b) { return std::copysign(a, b); }, kFI, Out::kFloat},
      {"xlogy", [](double a, double b) { return a == 0 ? 0 : a * std::log(b); }, kF, Out::kFloat, -2, 2, 0.1, 4, {},
       kTrig},
      {"logaddexp", [](double a, double b) { return std::max(a, b) + std::log1p(std::exp(-std::abs(a - b))); }, kF,
       Out::kFloat, -5, 5, -5, 5, {}, kTrig},
      {"eq", [](double a, double b) { return double(a == b); }, kAll, Out::kBool, -2, 2, -2, 2},
      {"ne", [](double a, double b) { return double(a != b); }, kAll, Out::kBool, -2, 2, -2, 2},
      {"lt", [](double a, double b) { return double(a < b); }, kAll, Out::kBool, -2, 2, -2, 2},
      {"le", [](double a, double b) { return double(a <= b); }, kAll, Out::kBool, -2, 2, -2, 2},
      {"gt", [](double a, double b) { return double(a > b); }, kAll, Out::kBool, -2, 2, -2, 2},
      {"ge", [](double a, double b) { return double(a >= b); }, kAll, Out::kBool, -2, 2, -2, 2},
      {"logical_and", [](double a, double b) { return double(a != 0 && b != 0); }, kAll, Out::kBool, -1, 1, -1, 1},
      {"logical_or", [](double a, double b) { return double(a != 0 || b != 0); }, kAll, Out::kBool, -1, 1, -1, 1},
      {"logical_xor", [](double a, double b) { return double((a != 0) != (b != 0)); }, kAll, Out::kBool, -1, 1, -1, 1},
      {"bitwise_and", [](double a, double b) { return double(int64_t(a) & int64_t(b)); }, bits, Out::kSame, 0, 9, 0, 9},
      {"bitwise_or", [](double a, double b) { return double(int64_t(a) | int64_t(b)); }, bits, Out::kSame, 0, 9, 0, 9},
      {"bitwise_xor", [](double a, double b) { return double(int64_t(a) ^ int64_t(b)); }, bits, Out::kSame, 0, 9, 0, 9},
  };
}

struct ShapePair {
  Shape a, b;
};

class BinaryTest : public ConformanceTest, public ::testing::WithParamInterface<ShapePair> {};

TEST_P(BinaryTest, EveryBinaryOpInEveryDType) {
  const auto& [sa, sb] = GetParam();
  for (const BinaryCase& c : binaryCases()) {
    for (DType dt : c.dtypes) {
      double lo = c.lo, blo = c.blo;
      if (dt == DType::U8) lo = std::max(lo, 0.0), blo = std::max(blo, 0.0);
      if (dt == DType::U8 && c.bhi < 0) continue;
      HostTensor a = randomTensor(dt, sa, lo, c.hi), b = randomTensor(dt, sb, blo, c.bhi);
      if (!isFloating(dt) && std::string(c.op) == "div") for (auto& v : b.values) v = std::max(v, 1.0);
      auto got = call(c.op, {a, b}, c.attrs);
      Shape out = *broadcastShapes(sa, sb);
      DType od = outDType(c.out, dt);
      HostTensor want{od, out, {}};
      for (int64_t i = 0; i < TensorDesc{od, out}.numel(); ++i) {
        double r = c.f(a.values[size_t(broadcastIndex(sa, out, i))], b.values[size_t(broadcastIndex(sb, out, i))]);
        if (dt == DType::Bool && c.out == Out::kSame) r = r != 0;
        want.values.push_back(roundTo(od, r));
      }
      Tolerance tol = (dt == DType::F32 || (c.out == Out::kFloat && !isFloating(dt))) && c.tol.atol >= 0 ? c.tol : Tolerance{-1, -1};
      expectClose(got[0], want, std::string(c.op) + " " + std::string(dtypeName(dt)) + " " + dimsName(sa) + " " + dimsName(sb), 1, tol);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Elementwise, BinaryTest,
                         ::testing::Values(ShapePair{{300}, {300}}, ShapePair{{3, 1, 5}, {4, 1}},
                                           ShapePair{{}, {7, 3}}, ShapePair{{2, 0}, {1, 1}},
                                           ShapePair{{5, 1, 7, 1, 3}, {1, 6, 1, 2, 3}}),
                         [](const auto& info) { return dimsName(info.param.a) + "_" + dimsName(info.param.b); });

TENSORD_COVERS(binary, "add", "sub", "mul", "div", "pow", "atan2", "maximum", "minimum", "fmod", "remainder", "hypot",
               "copysign", "xlogy", "logaddexp", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
               "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor");

TEST_F(ConformanceTest, ScalarOperandsAndAlpha) {
  HostTensor x = randomTensor(DType::F32, {4, 5});
  auto y = call("add", {x}, {{"other", 2.5}})[0];
  for (size_t i = 0; i < x.values.size(); ++i) EXPECT_FLOAT_EQ(float(y.values[i]), float(x.values[i] + 2.5));
  auto z = call("sub", {x, x}, {{"alpha", 0.5}})[0];
  for (size_t i = 0; i < x.values.size(); ++i) EXPECT_NEAR(z.values[i], x.values[i] * 0.5, 1e-6);
  // An int scalar keeps an int tensor int; a float scalar promotes it to f32 (Python scalars).
  HostTensor n = makeTensor(DType::I32, {3}, {1, 2, 3});
  EXPECT_EQ(call("mul", {n}, {{"other", int64_t(2)}})[0].dtype, DType::I32);
  auto f = call("mul", {n}, {{"other", 2.5}})[0];
  EXPECT_EQ(f.dtype, DType::F32);
  EXPECT_EQ(f.values, (std::vector<double>{2.5, 5, 7.5}));
  auto p = call("pow", {x}, {{"exponent", int64_t(2)}})[0];
  for (size_t i = 0; i < x.values.size(); ++i) EXPECT_NEAR(p.values[i], x.values[i] * x.values[i], 1e-6);
  // div's rounding modes on ints (Python's floor division) and true division to f32.
  HostTensor a = makeTensor(DType::I64, {4}, {7, -7, 7, -7}), b = makeTensor(DType::I64, {4}, {2, 2, -2, -2});
  EXPECT_EQ(call("div", {a, b}, {{"rounding_mode", std::string("floor")}})[0].values,
            (std::vector<double>{3, -4, -4, 3}));
  EXPECT_EQ(call("div", {a, b}, {{"rounding_mode", std::string("trunc")}})[0].values,
            (std::vector<double>{3, -3, -3, 3}));
  auto t = call("div", {a, b})[0];
  EXPECT_EQ(t.dtype, DType::F32);
  EXPECT_EQ(t.values, (std::vector<double>{3.5, -3.5, -3.5, 3.5}));
  EXPECT_EQ(call("remainder", {a, b})[0].values, (std::vector<double>{1, 1, -1, -1}));
  EXPECT_EQ(call("fmod", {a, b})[0].values, (std::vector<double>{1, -1, 1, -1}));
  // A 0-d tensor operand broadcasts like a scalar.
  auto s = call("mul", {x, makeTensor(DType::F32, {}, {3.0})})[0];
  for (size_t i = 0; i < x.values.size(); ++i) EXPECT_NEAR(s.values[i], 3 * x.values[i], 1e-6);
}

TEST_F(ConformanceTest, TypePromotionFollowsPyTorch) {
  auto dtypeOf = [&](DType a, const Shape& sa, DType b, const Shape& sb) {
    return call("add", {randomTensor(a, sa, 0, 3), randomTensor(b, sb, 0, 3)})[0].dtype;
  };
  EXPECT_EQ(dtypeOf(DType::I32, {2}, DType::F32, {2}), DType::F32);
  EXPECT_EQ(dtypeOf(DType::U8, {2}, DType::I32, {2}), DType::I32);
  EXPECT_EQ(dtypeOf(DType::I32, {2}, DType::I64, {2}), DType::I64);
  EXPECT_EQ(dtypeOf(DType::F16, {2}, DType::BF16, {2}), DType::F32);
  {
    // Mixed stored dtypes through the 4-wide loop: f16 + bf16 -> f32.
    HostTensor a = randomTensor(DType::F16, {300}), b = randomTensor(DType::BF16, {300});
    auto sum = call("add", {a, b})[0];
    HostTensor want{DType::F32, {300}, {}};
    for (size_t i = 0; i < a.values.size(); ++i) want.values.push_back(roundTo(DType::F32, a.values[i] + b.values[i]));
    expectClose(sum, want, "add f16 + bf16 [300]", 1, {0, 0});
  }
  EXPECT_EQ(dtypeOf(DType::F16, {2}, DType::F32, {}), DType::F16) << "a 0-d tensor of the same category does not promote";
  EXPECT_EQ(dtypeOf(DType::I32, {2}, DType::F16, {}), DType::F16) << "a 0-d tensor of a higher category does";
  EXPECT_EQ(call("add", {randomTensor(DType::Bool, {2})}, {{"other", int64_t(1)}})[0].dtype, DType::I64);
  EXPECT_EQ(call("add", {randomTensor(DType::F16, {2})}, {{"other", 1.5}})[0].dtype, DType::F16);
  auto mixed = call("mul", {makeTensor(DType::I32, {2}, {3, 4}), makeTensor(DType::F16, {2}, {0.5, 0.25})})[0];
  EXPECT_EQ(mixed.dtype, DType::F16);
  EXPECT_EQ(mixed.values, (std::vector<double>{1.5, 1.0}));
  EXPECT_EQ(call("lt", {makeTensor(DType::I32, {2}, {1, 2})}, {{"other", 1.5}})[0].values, (std::vector<double>{1, 0}));
}

TEST_F(ConformanceTest, TernaryOps) {
  Shape s{3, 4};
  HostTensor cond = randomTensor(DType::Bool, {3, 1}), x = randomTensor(DType::F32, s), y = randomTensor(DType::F32, {4});
  auto w = call("where", {cond, x, y})[0];
  for (int64_t i = 0; i < 12; ++i) {
    double want = cond.values[size_t(i / 4)] != 0 ? x.values[size_t(i)] : y.values[size_t(i % 4)];
    EXPECT_EQ(w.values[size_t(i)], want);
  }
  auto w0 = call("where", {cond, x}, {{"other", 0.0}})[0];
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(w0.values[size_t(i)], cond.values[size_t(i / 4)] != 0 ? x.values[size_t(i)] : 0.0);
  auto wi = call("where", {cond, makeTensor(DType::I64, {1}, {5})}, {{"other", int64_t(-1)}})[0];
  EXPECT_EQ(wi.dtype, DType::I64);
  for (DType dt : kF) {
    HostTensor a = randomTensor(dt, s), b = randomTensor(dt, s), c = randomTensor(dt, s, 0.5, 2);
    HostTensor want{dt, s, {}};
    for (size_t i = 0; i < 12; ++i) want.values.push_back(roundTo(dt, a.values[i] + c.values[i] * (b.values[i] - a.values[i])));
    expectClose(call("lerp", {a, b, c})[0], want, "lerp " + std::string(dtypeName(dt)));
    want.values.clear();
    for (size_t i = 0; i < 12; ++i) want.values.push_back(roundTo(dt, a.values[i] + 0.5 * (b.values[i] - a.values[i])));
    expectClose(call("lerp", {a, b}, {{"weight", 0.5}})[0], want, "lerp scalar weight");
    want.values.clear();
    for (size_t i = 0; i < 12; ++i) want.values.push_back(roundTo(dt, a.values[i] + 2 * b.values[i] * c.values[i]));
    expectClose(call("addcmul", {a, b, c}, {{"value", 2.0}})[0], want, "addcmul", 2);
    want.values.clear();
    for (size_t i = 0; i < 12; ++i) want.values.push_back(roundTo(dt, a.values[i] + 2 * b.values[i] / c.values[i]));
    expectClose(call("addcdiv", {a, b, c}, {{"value", 2.0}})[0], want, "addcdiv", 4);
  }
  // clamp: tensor bounds, scalar bounds, one open bound, ints.
  HostTensor v = randomTensor(DType::F32, s, -3, 3);
  auto c1 = call("clamp", {v}, {{"min", -1.0}, {"max", 0.5}})[0];
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(c1.values[i], std::clamp(v.values[i], -1.0, 0.5));
  auto c2 = call("clamp", {v}, {{"min", 0.0}})[0];
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(c2.values[i], std::max(v.values[i], 0.0));
  HostTensor lo = randomTensor(DType::F32, {4}, -1, 0), hi = randomTensor(DType::F32, {4}, 0, 1);
  auto c3 = call("clamp", {v, lo, hi})[0];
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(c3.values[i], std::min(std::max(v.values[i], lo.values[i % 4]), hi.values[i % 4]));
  auto ci = call("clamp", {makeTensor(DType::I32, {3}, {-5, 0, 5})}, {{"max", int64_t(2)}})[0];
  EXPECT_EQ(ci.dtype, DType::I32);
  EXPECT_EQ(ci.values, (std::vector<double>{-5, 0, 2}));
}

TENSORD_COVERS(ternary, "where", "lerp", "addcmul", "addcdiv", "clamp");

TEST_F(ConformanceTest, CastsBetweenEveryDType) {
  // 8 values: between floats, the 4-wide dense loop (7 would take the scalar one).
  HostTensor x = makeTensor(DType::F32, {8}, {-2.75, -1.5, 0.0, 0.5, 1.0, 3.25, 300.0, 2.0});
  for (DType from : kAll) {
    HostTensor src = makeTensor(from, {8}, x.values);
    for (DType to : kAll) {
      auto y = call("to", {src}, {{"dtype", std::string(dtypeName(to))}})[0];
      HostTensor want{to, {8}, {}};
      for (double v : src.values) want.values.push_back(roundTo(to, v));
      expectClose(y, want, "to " + std::string(dtypeName(from)) + " -> " + std::string(dtypeName(to)), 1, {0, 0});
    }
  }
  // bf16 rounds to nearest even on the way out.
  auto b = call("to", {makeTensor(DType::F32, {2}, {1.00390625, 1.01171875})}, {{"dtype", std::string("bf16")}})[0];
  EXPECT_EQ(b.values, (std::vector<double>{1.0, 1.015625}));
  // ... in the 4-wide loop too.
  auto b4 = call("to", {makeTensor(DType::F32, {4}, {1.00390625, 1.01171875, -1.00390625, 3.0})},
                 {{"dtype", std::string("bf16")}})[0];
  EXPECT_EQ(b4.values, (std::vector<double>{1.0, 1.015625, -1.0, 3.0}));
}

TENSORD_COVERS(cast, "to");

TEST_F(ConformanceTest, LargeTensorsPastTheWorkgroupLimit) {
  // 17M elements: more than 65535 workgroups of 256 threads.
  HostTensor a = randomTensor(DType::F32, {17'000'000}), b = makeTensor(DType::F32, {1}, {0.5});
  auto c = call("add", {a, b})[0];
  size_t bad = 0;
  for (size_t i = 0; i < a.values.size(); ++i) bad += c.values[i] != roundTo(DType::F32, a.values[i] + 0.5);
  EXPECT_EQ(bad, 0u);
}

// Every loop of the elementwise kernels past its first pass, on an engine
// whose dispatches are capped at 3 workgroups (TENSORD_MAX_WORKGROUPS), so
// each workgroup takes many chunks: the 4-wide loop, the scalar dense loop
// (a length not a multiple of 4), the strided loop (a broadcast operand)
// and a fused kernel's dense loop. Each runs in place (the output is its
// first input, x[i] = i): an element missed keeps i, one taken twice gets
// the op applied twice.
TEST_F(ConformanceTest, ElementwiseLoopsPastTheWorkgroupCap) {
  ::setenv("TENSORD_MAX_WORKGROUPS", "3", 1);
  auto capped = limitedEngine(64 << 20, "group-cap");
  ::unsetenv("TENSORD_MAX_WORKGROUPS");
  Engine* on = capped.get();
  auto arange = [&](int64_t n) { return run("arange", {}, {{"end", n}, {"dtype", std::string("f32")}}, on)[0]; };
  auto inPlace = [&](const OpSpec& spec, std::vector<TensorView> in, const Attrs& attrs) {
    std::promise<void> done;
    capped->enqueueOp("test", spec, in, {in[0]}, attrs, [&done](std::exception_ptr e) {
      if (e)
        done.set_exception(e);
      else
        done.set_value();
    });
    done.get_future().get();
  };
  auto expectEach = [&](const TensorView& t, const std::function<double(int64_t)>& want, const std::string& what) {
    const std::vector<float> got = download(t, on);
    size_t bad = 0, first = got.size();
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] != float(want(int64_t(i)))) {
        if (bad++ == 0) first = i;
      }
    }
    EXPECT_EQ(bad, 0u) << what << ": first at " << first << ": " << (first < got.size() ? got[first] : 0.0f)
                       << ", expected " << (first < got.size() ? want(int64_t(first)) : 0.0);
  };
  const OpSpec& add = *capped->ops().find("add");
  const Attrs none = validateAttrs(add, {});
  for (int64_t n : {int64_t(100'000), int64_t(100'003)}) {  // 4-wide loop; scalar dense loop
    auto x = arange(n), half = run("full", {}, {{"size", Shape{n}}, {"fill_value", 0.5}}, on)[0];
    inPlace(add, {x, half}, none);
    expectEach(
        x, [](int64_t i) { return double(i) + 0.5; }, "add of " + std::to_string(n));
  }
  auto x = arange(100'000), row = run("full", {}, {{"size", Shape{100}}, {"fill_value", 0.5}}, on)[0];
  x.desc.shape = {1000, 100};
  inPlace(add, {x, row}, none);
  expectEach(
      x, [](int64_t i) { return double(i) + 0.5; }, "add of a broadcast row");
  // Fused: (x + 0.5) * 0.5.
  const OpSpec& mul = *capped->ops().find("mul");
  const Attrs mulAttrs = validateAttrs(mul, {});
  const TensorDesc desc{DType::F32, {100'000}};
  FusedCall first{.spec = &add, .attrs = &none, .inputs = {0, 1}, .inputDescs = {desc, desc}};
  FusedCall second{.spec = &mul, .attrs = &mulAttrs, .inputs = {-1, 1}, .inputDescs = {desc, desc}};
  auto fused = fuseElementwise({first, second}, {desc, desc}, {1}, desc.shape);
  auto y = arange(100'000), half = run("full", {}, {{"size", Shape{100'000}}, {"fill_value", 0.5}}, on)[0];
  inPlace(*fused, {y, half}, Attrs{});
  expectEach(
      y, [](int64_t i) { return (double(i) + 0.5) * 0.5; }, "fused add, mul");
}

TEST_F(ConformanceTest, ElementwiseErrorsNameOpArgumentExpectedAndGot) {
  HostTensor a = randomTensor(DType::F32, {2, 3}), b = randomTensor(DType::F32, {4, 5});
  EXPECT_EQ(errorOf("add", {a, b}),
            "add: inputs 'input' f32[2, 3] and 'other' f32[4, 5] cannot be broadcast together (trailing dims must "
            "match or be 1)");
  EXPECT_EQ(errorOf("add", {a}), "add: operand 'other' is missing; give it as an input tensor or as the scalar attribute 'other'");
  EXPECT_EQ(errorOf("exp", {randomTensor(DType::F32, {2})}, {{"alpha", 1.0}}), "exp: unknown attribute 'alpha'; it takes none");
  EXPECT_EQ(errorOf("bitwise_and", {randomTensor(DType::F32, {2}), randomTensor(DType::F32, {2})}),
            "bitwise_and: input 'input' has dtype f32; expected one of i32, i64, u8, bool");
  EXPECT_EQ(errorOf("bitwise_and", {makeTensor(DType::I32, {2}, {1, 2})}, {{"other", 2.5}}),
            "bitwise_and: scalar 'other' promote the computation to f32, which bitwise_and does not take");
  EXPECT_EQ(errorOf("to", {a}, {{"dtype", std::string("f64")}}),
            "to: attribute 'dtype' is 'f64'; expected one of f32, f16, bf16, i32, i64, u8, bool");
  EXPECT_EQ(errorOf("where", {a, a, a}), "where: input 'condition' has dtype f32; expected bool (a mask)");
  EXPECT_EQ(errorOf("leaky_relu", {a}, {{"negative_slope", std::string("x")}}),
            "leaky_relu: attribute 'negative_slope' expects float, got text");
}

}  // namespace
}  // namespace tensord::compute::testing
