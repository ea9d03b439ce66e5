// Gradcheck cases of the elementwise family (see gradcheck.h).

#include "tests/compute/gradcheck.h"

namespace tensord::compute::testing {
namespace {

const Shape kS = {3, 5};

std::vector<GradCase> unaryCases() {
  std::vector<GradCase> c;
  // Smooth on the whole line.
  for (const char* op : {"neg", "square", "exp", "exp2", "expm1", "sin", "cos", "sinh", "cosh", "tanh",
                         "asinh", "atan", "erf", "erfc", "sigmoid", "logsigmoid", "silu", "mish", "softsign",
                         "gelu", "clone", "nan_to_num"}) {
    c.push_back({op, {uniform(kS)}});
  }
  c.push_back({"gelu", {uniform(kS, -3, 3)}, {{"approximate", std::string("tanh")}}});
  // Kinks at 0 (or at the attribute's bounds): inputs kept away from them.
  for (const char* op : {"abs", "relu", "selu", "leaky_relu", "elu", "celu"}) c.push_back({op, {awayFromZero(kS, 2)}});
  c.push_back({"leaky_relu", {awayFromZero(kS, 2)}, {{"negative_slope", 0.2}}});
  c.push_back({"elu", {awayFromZero(kS, 2)}, {{"alpha", 0.5}}});
  c.push_back({"celu", {awayFromZero(kS, 2)}, {{"alpha", 2.0}}});
  c.push_back({"relu6", {values({6}, {-1.0, 0.5, 2.0, 5.5, 7.0, 3.0})}});
  c.push_back({"hardtanh", {values({6}, {-1.5, -0.5, 0.3, 0.9, 1.4, 0.0})}});
  c.push_back({"hardtanh", {values({4}, {-2.5, -1.5, 0.3, 2.4})}, {{"min_val", -2.0}, {"max_val", 2.0}}});
  c.push_back({"hardsigmoid", {values({6}, {-4.0, -2.5, -0.5, 0.7, 2.5, 4.0})}});
  c.push_back({"hardswish", {values({6}, {-4.0, -2.5, -0.5, 0.7, 2.5, 4.0})}});
  c.push_back({"softplus", {uniform(kS, -3, 3)}});
  // The linear part starts (with a jump) at beta x = threshold, x = 0.5 here.
  c.push_back({"softplus", {values({6}, {-2.0, -0.5, 0.1, 0.4, 0.6, 2.0})}, {{"beta", 2.0}, {"threshold", 1.0}}});
  // Piecewise constant: zero gradient away from the steps.
  for (const char* op : {"sign", "floor", "ceil", "trunc", "frac"}) c.push_back({op, {nonInteger(kS)}});
  c.push_back({"round", {values({6}, {-2.2, -0.9, 0.1, 1.3, 2.8, 3.7})}});
  // Restricted domains.
  for (const char* op : {"reciprocal", "sqrt", "rsqrt", "log", "log2", "log10", "log1p"}) {
    c.push_back({op, {uniform(kS, 0.5, 2)}});
  }
  for (const char* op : {"asin", "acos", "atanh", "erfinv"}) c.push_back({op, {uniform(kS, -0.8, 0.8)}});
  c.push_back({"tan", {uniform(kS, -1.2, 1.2)}});
  c.push_back({"acosh", {uniform(kS, 1.5, 3)}});
  c.push_back({"logit", {uniform(kS, 0.1, 0.9)}});
  c.push_back({"logit", {values({4}, {0.05, 0.3, 0.7, 0.97})}, {{"eps", 0.1}}});
  c.push_back({"to", {uniform(kS)}, {{"dtype", std::string("f32")}}});
  return c;
}

std::vector<GradCase> binaryCases() {
  std::vector<GradCase> c;
  // Broadcasting both ways: [3, 5] against [5] and [3, 1].
  for (const char* op : {"add", "sub", "mul", "hypot", "logaddexp"}) {
    c.push_back({op, {uniform({3, 5}), uniform({5})}});
    c.push_back({op, {uniform({3, 1}), uniform({2, 3, 5})}});
  }
  // atan2 jumps by 2 pi across y = 0 where x < 0: keep x positive.
  c.push_back({"atan2", {uniform({3, 5}), uniform({5}, 0.5, 1.5)}});
  c.push_back({"atan2", {uniform({3, 1}), uniform({2, 3, 5}, 0.5, 1.5)}});
  c.push_back({"add", {uniform(kS), uniform(kS)}, {{"alpha", 2.5}}});
  c.push_back({"sub", {uniform(kS), uniform({5})}, {{"alpha", -0.5}}});
  c.push_back({"add", {uniform(kS)}, {{"other", 2.0}}});
  c.push_back({"mul", {uniform(kS)}, {{"other", -3.0}}});
  c.push_back({"div", {uniform({3, 5}), uniform({5}, 0.5, 2)}});
  c.push_back({"div", {uniform({3, 5})}, {{"other", 4.0}}});
  c.push_back({"div", {uniform({3, 5}, 1, 5), uniform({5}, 0.7, 2)}, {{"rounding_mode", std::string("floor")}}, 1e-2, 1e-4});
  c.push_back({"pow", {uniform({3, 5}, 0.5, 2), uniform({5}, -1.5, 2)}});
  c.push_back({"pow", {uniform(kS, 0.5, 2)}, {{"exponent", 3.0}}});
  // distinct({3, 5}) is a grid of step 2/15; `other` sits halfway between grid points, so no
  // perturbation makes a tie.
  const std::vector<double> between = {-0.8667, -0.4667, -0.0667, 0.2, 0.6};
  c.push_back({"maximum", {distinct({3, 5}), values({5}, between)}});
  c.push_back({"minimum", {distinct({3, 5}), values({5}, between)}});
  {
    // Dividends halfway between multiples of the divisor: fmod and remainder jump at the multiples.
    const std::vector<double> divisor = {1.3, -1.7, 2.1, 0.9, -2.6};
    std::vector<double> dividend;
    for (int i = 0; i < 15; ++i) dividend.push_back(divisor[size_t(i % 5)] * (i / 5 - 1 + (i % 2 ? 0.5 : -0.5) + 0.1 * (i % 3)));
    c.push_back({"fmod", {values(kS, dividend), values({5}, divisor)}, {}, 1e-2, 1e-3});
    c.push_back({"remainder", {values(kS, dividend), values({5}, divisor)}, {}, 1e-2, 1e-3});
  }
  c.push_back({"copysign", {awayFromZero(kS), awayFromZero({5})}});
  c.push_back({"xlogy", {uniform(kS), uniform({5}, 0.5, 2)}});
  c.push_back({"where", {mask(kS), uniform({5}), uniform({3, 1})}});
  c.push_back({"where", {mask(kS), uniform(kS)}, {{"other", 0.5}}});
  c.push_back({"lerp", {uniform(kS), uniform({5}), uniform({3, 1})}});
  c.push_back({"lerp", {uniform(kS), uniform(kS)}, {{"weight", 0.3}}});
  c.push_back({"addcmul", {uniform({5}), uniform(kS), uniform({3, 1})}, {{"value", 0.5}}});
  c.push_back({"addcdiv", {uniform({5}), uniform(kS), uniform({3, 1}, 0.5, 2)}, {{"value", -2.0}}});
  // Bounds halfway between the input's grid points (see maximum).
  c.push_back({"clamp", {distinct(kS), values({5}, {-0.3333, -0.4667, -0.2, -0.6, -0.0667}), values({3, 1}, {0.2, 0.4667, 0.3333})}});
  c.push_back({"clamp", {distinct(kS)}, {{"min", -0.2}, {"max", 0.3333}}});
  return c;
}

const std::vector<GradCase> kUnary = unaryCases();
const std::vector<GradCase> kBinary = binaryCases();
TENSORD_GRAD_CASES(unary, kUnary);
TENSORD_GRAD_CASES(binary, kBinary);

TEST_F(GradcheckTest, ElementwiseUnary) { checkAll(kUnary); }
TEST_F(GradcheckTest, ElementwiseBinary) { checkAll(kBinary); }

}  // namespace
}  // namespace tensord::compute::testing
