// The elementwise ops: unary math and activations, binary arithmetic and
// comparisons (broadcasting, PyTorch type promotion, scalar operands), the
// ternary ops, and casts. All share the elementwise template; an op is an
// expression over a, b, c (operands) and s0, s1 (scalar attributes) in the
// compute type T; math.glsl has the helpers (erf_f, pow_f, mod_i ...).

#include <cmath>
#include <limits>

#include "compute/op_families.h"
#include "compute/template_elementwise.h"

namespace tensord::compute {
namespace {

// relu on floats as integer operations on the bits: negative numbers (sign
// set, not NaN) become +0, everything else (NaN included) passes through.
// NVIDIA's compiler turns the obvious `a < 0.0 ? 0.0 : a` into a max that
// drops NaN, and an isnan guard in front of max costs bandwidth there.
constexpr const char* kReluFloat =
    "uintBitsToFloat(floatBitsToUint(a) > 0x80000000u && floatBitsToUint(a) <= 0xFF800000u ? 0u : "
    "floatBitsToUint(a))";

using R = ElementwiseSpec::Result;
using ExprFn = std::function<std::string(const Attrs&, DType)>;

const std::vector<DType> kSigned = {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64};
const std::vector<DType> kBits = {DType::I32, DType::I64, DType::U8, DType::Bool};

ExprFn same(std::string expr) {
  return [expr = std::move(expr)](const Attrs&, DType) { return expr; };
}

// One expression for float compute, one for integral (and bool) compute.
ExprFn byKind(std::string floatExpr, std::string intExpr) {
  return [f = std::move(floatExpr), i = std::move(intExpr)](const Attrs&, DType d) { return isFloating(d) ? f : i; };
}

AttrSpec scalarAttr(std::string name, std::string doc, bool optional = true) {
  return {std::move(name), AttrType::kScalar, std::nullopt, std::move(doc), optional};
}

AttrSpec floatAttr(std::string name, double value, std::string doc) {
  return {std::move(name), AttrType::kFloat, value, std::move(doc)};
}

// `differentiable` is recorded now; the backward ops themselves come with autograd.
OpSpec op(std::string name, std::vector<InputSpec> inputs, std::vector<AttrSpec> attrs, std::vector<DType> dtypes,
          ElementwiseSpec e, bool differentiable, std::string doc) {
  return {.name = std::move(name),
          .category = "elementwise",
          .inputs = std::move(inputs),
          .outputs = {"out"},
          .attrs = std::move(attrs),
          .dtypes = std::move(dtypes),
          .kernel = elementwise(std::move(e)),
          .backward = "",
          .doc = std::move(doc),
          .promote = true,
          .differentiable = differentiable};
}

// Ops with a float result have a gradient; comparisons, predicates and
// integer-only (bitwise) ops do not.
bool differentiable(R result, const std::vector<DType>& dtypes) {
  if (result == R::kBool || result == R::kLogical) return false;
  for (DType d : dtypes) {
    if (isFloating(d)) return true;
  }
  return false;
}

// y = f(x)
OpSpec unary(std::string name, ExprFn expr, R result, std::vector<DType> dtypes, std::string doc,
             std::vector<AttrSpec> params = {}) {
  std::vector<std::string> names;  // numeric attributes become the scalars s0, s1, ...
  for (const auto& p : params) {
    if (p.type == AttrType::kFloat || p.type == AttrType::kInt || p.type == AttrType::kScalar) names.push_back(p.name);
  }
  bool diff = differentiable(result, dtypes);
  return op(name, {{"input"}}, std::move(params), std::move(dtypes),
            {.arity = 1, .params = std::move(names), .result = result, .expr = std::move(expr)}, diff,
            std::move(doc));
}

// c = f(a, b), b a tensor or the scalar attribute `other`.
OpSpec binary(std::string name, ExprFn expr, R result, std::vector<DType> dtypes, std::string doc,
              std::vector<AttrSpec> params = {}, std::string other = "other") {
  std::vector<std::string> names;
  for (const auto& p : params) names.push_back(p.name);
  std::vector<AttrSpec> attrs = std::move(params);
  attrs.push_back(scalarAttr(other, "the second operand as a number, when not given as a tensor"));
  bool diff = differentiable(result, dtypes);
  return op(name, {{"input"}, {other, InputRole::kData, true}}, std::move(attrs), std::move(dtypes),
            {.arity = 2, .params = std::move(names), .result = result, .expr = std::move(expr)}, diff,
            std::move(doc));
}

}  // namespace

void addElementwiseOps(std::vector<OpSpec>& ops) {
  const auto& F = kFloatDTypes;
  const auto& N = kNumericDTypes;
  // ------------------------------------------------------------ unary, dtype kept
  ops.push_back(unary("abs", [](const Attrs&, DType d) { return d == DType::U8 ? "a" : "abs(a)"; }, R::kSame, N,
                      "|x|"));
  ops.push_back(unary("neg", same("-a"), R::kSame, kSigned, "-x"));
  ops.push_back(unary("sign", [](const Attrs&, DType d) { return d == DType::U8 ? "min(a, 1u)" : "sign(a)"; },
                      R::kSame, N, "-1, 0 or 1 by the sign of x (0 for NaN's sign bit aside, NaN stays NaN)"));
  ops.push_back(unary("square", same("a * a"), R::kSame, N, "x * x"));
  ops.push_back(unary("floor", byKind("floor(a)", "a"), R::kSame, N, "largest integer <= x"));
  ops.push_back(unary("ceil", byKind("ceil(a)", "a"), R::kSame, N, "smallest integer >= x"));
  ops.push_back(unary("round", byKind("roundEven(a)", "a"), R::kSame, N, "nearest integer, ties to even (as torch.round)"));
  ops.push_back(unary("trunc", byKind("trunc(a)", "a"), R::kSame, N, "integer part, towards zero"));
  ops.push_back(unary("frac", same("a - trunc(a)"), R::kSame, F, "x - trunc(x)"));
  ops.push_back(unary("relu", [](const Attrs&, DType d) { return isFloating(d) ? kReluFloat : d == DType::U8 ? "a" : d == DType::I64 ? "max(a, 0l)" : "max(a, 0)"; },
                      R::kSame, N, "max(x, 0)"));
  // ------------------------------------------------------------ unary float math (ints compute in f32)
  struct Math {
    const char* name;
    const char* expr;
    const char* doc;
  };
  for (const Math& m : std::initializer_list<Math>{
           {"reciprocal", "1.0 / a", "1 / x"},
           {"sqrt", "sqrt(a)", "square root"},
           {"rsqrt", "inversesqrt(a)", "1 / sqrt(x)"},
           {"exp", "exp(a)", "e^x"},
           {"exp2", "exp2(a)", "2^x"},
           {"expm1", "expm1_f(a)", "e^x - 1, accurate near 0"},
           {"log", "log(a)", "natural logarithm"},
           {"log2", "log2(a)", "base-2 logarithm"},
           {"log10", "log(a) * 0.4342944819032518", "base-10 logarithm"},
           {"log1p", "log1p_f(a)", "log(1 + x), accurate near 0"},
           {"sin", "sin(a)", "sine"},
           {"cos", "cos(a)", "cosine"},
           {"tan", "tan(a)", "tangent"},
           {"asin", "asin_f(a)", "arcsine"},
           {"acos", "acos_f(a)", "arccosine"},
           {"atan", "atan_f(a)", "arctangent"},
           {"sinh", "sinh(a)", "hyperbolic sine"},
           {"cosh", "cosh(a)", "hyperbolic cosine"},
           {"tanh", "tanh(a)", "hyperbolic tangent"},
           {"asinh", "asinh(a)", "inverse hyperbolic sine"},
           {"acosh", "acosh(a)", "inverse hyperbolic cosine"},
           {"atanh", "atanh(a)", "inverse hyperbolic tangent"},
           {"erf", "erf_f(a)", "error function"},
           {"erfc", "erfc_f(a)", "complementary error function, 1 - erf(x)"},
           {"erfinv", "erfinv_f(a)", "inverse error function"},
           {"sigmoid", "sigmoid_f(a)", "1 / (1 + e^-x)"},
           {"logsigmoid", "min(a, 0.0) - log1p_f(exp(-abs(a)))", "log(sigmoid(x)), stable for large |x|"},
           {"silu", "a * sigmoid_f(a)", "x * sigmoid(x) (swish)"},
           {"mish", "a * tanh(softplus_f(a, 1.0, 20.0))", "x * tanh(softplus(x))"},
           {"softsign", "a / (1.0 + abs(a))", "x / (1 + |x|)"},
           {"selu", "1.0507009873554805 * (a > 0.0 ? a : 1.6732632423543772 * expm1_f(a))",
            "scale * (max(0, x) + min(0, alpha * (e^x - 1))), PyTorch's alpha and scale"},
           {"hardsigmoid", "clamp(a / 6.0 + 0.5, 0.0, 1.0)", "relu6(x + 3) / 6"},
           {"hardswish", "a * clamp(a / 6.0 + 0.5, 0.0, 1.0)", "x * relu6(x + 3) / 6"},
       }) {
    ops.push_back(unary(m.name, same(m.expr), R::kFloat, N, m.doc));
  }
  ops.push_back(unary("relu6", same("(isnan(a) ? a : clamp(a, 0.0, 6.0))"), R::kSame, F, "min(max(x, 0), 6)"));
  ops.push_back(unary("leaky_relu", same("a >= 0.0 ? a : a * s0"), R::kSame, F, "x if x >= 0 else negative_slope * x",
                      {floatAttr("negative_slope", 0.01, "slope for x < 0")}));
  ops.push_back(unary("elu", same("a > 0.0 ? a : s0 * expm1_f(a)"), R::kSame, F, "x if x > 0 else alpha * (e^x - 1)",
                      {floatAttr("alpha", 1.0, "scale of the negative part")}));
  ops.push_back(unary("celu", same("max(a, 0.0) + min(0.0, s0 * expm1_f(a / s0))"), R::kSame, F,
                      "max(0, x) + min(0, alpha * (e^(x/alpha) - 1))", {floatAttr("alpha", 1.0, "alpha")}));
  ops.push_back(unary("softplus", same("softplus_f(a, s0, s1)"), R::kSame, F,
                      "log(1 + e^(beta x)) / beta; x where beta x > threshold",
                      {floatAttr("beta", 1.0, "beta"), floatAttr("threshold", 20.0, "linear above this")}));
  ops.push_back(unary("hardtanh", same("a < s0 ? s0 : (a > s1 ? s1 : a)"), R::kSame, F, "clamp(x, min_val, max_val)",
                      {floatAttr("min_val", -1.0, "lower bound"), floatAttr("max_val", 1.0, "upper bound")}));
  ops.push_back(unary(
      "gelu",
      [](const Attrs& attrs, DType) -> std::string {
        if (attrs.getText("approximate") == "tanh") {
          return "0.5 * a * (1.0 + tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)))";
        }
        // 1 + erf(z) as erfc(-z): one branch-free evaluation (erf_f's two
        // ranges diverge on typical inputs), and a negative tail that keeps
        // its relative precision where 1 + erf(z) cancels.
        return "0.5 * a * erfc_f(-0.7071067811865476 * a)";
      },
      R::kSame, F, "x * Phi(x); approximate='tanh' uses PyTorch's tanh approximation",
      {{"approximate", AttrType::kText, std::string("none"), "'none' (exact, erf) or 'tanh'"}}));
  {
    // logit(x, eps): log(z / (1 - z)) with z = clamp(x, eps, 1 - eps) when eps is given.
    ElementwiseSpec e{.arity = 2, .absent = {NAN, -1.0}, .result = R::kFloat,
                      .expr = [](const Attrs& attrs, DType) -> std::string {
                        if (!attrs.has("eps")) return "log(a / (1.0 - a))";
                        return "log(clamp(a, b, 1.0 - b) / (1.0 - clamp(a, b, 1.0 - b)))";
                      }};
    ops.push_back(op("logit", {{"input"}, {"eps", InputRole::kData, true}},
                     {scalarAttr("eps", "clamp x to [eps, 1 - eps] first; none by default")}, N, e, true,
                     "log(x / (1 - x))"));
  }
  ops.push_back(op("nan_to_num", {{"input"}},
                   {{"nan", AttrType::kFloat, 0.0, "replaces NaN"},
                    scalarAttr("posinf", "replaces +inf; the dtype's largest value by default"),
                    scalarAttr("neginf", "replaces -inf; the dtype's lowest value by default")},
                   F,
                   {.arity = 1, .params = {"nan"}, .result = R::kSame,
                    .expr = [](const Attrs& attrs, DType d) {
                      double big = d == DType::F16 ? 65504.0 : d == DType::BF16 ? 3.3895313892515355e38 : 3.4028234663852886e38;
                      char buf[64];
                      std::snprintf(buf, sizeof buf, "%.9g", big);
                      std::string pos = attrs.has("posinf") ? "float(" + std::to_string(attrs.getNumber("posinf")) + ")" : std::string("float(") + buf + ")";
                      std::snprintf(buf, sizeof buf, "%.9g", -big);
                      std::string neg = attrs.has("neginf") ? "float(" + std::to_string(attrs.getNumber("neginf")) + ")" : std::string("float(") + buf + ")";
                      return "isnan(a) ? s0 : isinf(a) ? (a > 0.0 ? " + pos + " : " + neg + ") : a";
                    }},
                   true, "replaces NaN, +inf and -inf by finite numbers"));
  // clamp(input, min?, max?): bounds as tensors or scalar attributes; absent bounds are open.
  ops.push_back(op("clamp", {{"input"}, {"min", InputRole::kData, true}, {"max", InputRole::kData, true}},
                   {scalarAttr("min", "lower bound"), scalarAttr("max", "upper bound")}, N,
                   {.arity = 3, .absent = {NAN, -INFINITY, INFINITY}, .result = R::kSame,
                    .expr = byKind("isnan(a) ? a : min(max(a, b), c)", "min(max(a, b), c)")},
                   true, "min(max(x, min), max); a missing bound is open"));
  // ------------------------------------------------------------ predicates
  ops.push_back(unary("isnan", byKind("isnan(a)", "false"), R::kBool, kAllDTypes, "x is NaN"));
  ops.push_back(unary("isinf", byKind("isinf(a)", "false"), R::kBool, kAllDTypes, "x is +-inf"));
  ops.push_back(unary("isfinite", byKind("!(isnan(a) || isinf(a))", "true"), R::kBool, kAllDTypes, "x is finite"));
  ops.push_back(unary("logical_not", same("!a"), R::kLogical, kAllDTypes, "x == 0, as bool"));
  ops.push_back(unary("bitwise_not", [](const Attrs&, DType d) { return d == DType::Bool ? "!a" : "~a"; }, R::kSame,
                      kBits, "~x (logical not for bool)"));
  ops.push_back({.name = "to",
                 .category = "elementwise",
                 .inputs = {{"input"}},
                 .outputs = {"out"},
                 .attrs = {{"dtype", AttrType::kText, std::nullopt, "target dtype: f32 f16 bf16 i32 i64 u8 bool"}},
                 .dtypes = kAllDTypes,
                 .kernel = elementwise({.arity = 1, .result = R::kSame, .dtypeAttr = "dtype",
                                        .expr = same("a")}),
                 .backward = "",
                 .doc = "a copy converted to `dtype` (floats to ints truncate towards zero; bf16 rounds to nearest even)"});
  ops.push_back(unary("clone", same("a"), R::kSame, kAllDTypes, "a copy"));
  // ------------------------------------------------------------ binary arithmetic
  auto withAlpha = [](std::string name, const char* opSym) {
    std::vector<AttrSpec> a = {{"alpha", AttrType::kScalar, int64_t(1), "multiplier of other"}};
    return binary(name,
                  [opSym](const Attrs& attrs, DType d) {
                    bool one = attrs.getNumber("alpha") == 1.0;
                    if (d == DType::Bool) return std::string(opSym[0] == '+' ? "a || b" : "a != b");
                    return one ? "a " + std::string(opSym) + " b" : "a " + std::string(opSym) + " s0 * b";
                  },
                  R::kSame, kAllDTypes, std::string("input ") + opSym + " alpha * other, broadcasting", a);
  };
  ops.push_back(withAlpha("add", "+"));
  ops.push_back(withAlpha("sub", "-"));
  ops.push_back(binary("mul", [](const Attrs&, DType d) { return d == DType::Bool ? "a && b" : "a * b"; }, R::kSame,
                       kAllDTypes, "input * other, broadcasting"));
  {
    auto e = ElementwiseSpec{.arity = 2,
                             .resultFor = [](const Attrs& attrs) {
                               return attrs.getText("rounding_mode") == "none" ? R::kFloat : R::kSame;
                             },
                             .expr = [](const Attrs& attrs, DType d) -> std::string {
                               const std::string& mode = attrs.getText("rounding_mode");
                               if (mode == "none") return "a / b";
                               if (isFloating(d)) return mode == "trunc" ? "trunc(a / b)" : "floor(a / b)";
                               if (mode == "trunc") return "a / b";
                               return d == DType::I64 ? "floordiv_l(a, b)" : d == DType::I32 ? "floordiv_i(a, b)" : "a / b";
                             }};
    ops.push_back(op("div", {{"input"}, {"other", InputRole::kData, true}},
                     {scalarAttr("other", "the divisor as a number"),
                      {"rounding_mode", AttrType::kText, std::string("none"),
                       "'none' (true division; ints give f32), 'trunc' or 'floor'"}},
                     N, e, true, "input / other, broadcasting"));
  }
  ops.push_back(binary("pow",
                       [](const Attrs&, DType d) {
                         return isFloating(d) ? "pow_f(a, b)" : d == DType::I64 ? "pow_l(a, b)" : d == DType::I32 ? "pow_i(a, b)" : "uint(pow_i(int(a), int(b)))";
                       },
                       R::kSame, N, "input ^ exponent, broadcasting", {}, "exponent"));
  ops.push_back(binary("atan2", same("atan2_f(a, b)"), R::kFloat, N, "atan(input / other) in the right quadrant"));
  ops.push_back(binary("maximum",
                       [](const Attrs&, DType d) {
                         return isFloating(d) ? "(isnan(a) || isnan(b)) ? a + b : max(a, b)" : d == DType::Bool ? "a || b" : "max(a, b)";
                       },
                       R::kSame, kAllDTypes, "elementwise max; NaN propagates"));
  ops.push_back(binary("minimum",
                       [](const Attrs&, DType d) {
                         return isFloating(d) ? "(isnan(a) || isnan(b)) ? a + b : min(a, b)" : d == DType::Bool ? "a && b" : "min(a, b)";
                       },
                       R::kSame, kAllDTypes, "elementwise min; NaN propagates"));
  ops.push_back(binary("fmod", byKind("fmod_f(a, b)", "a - (a / b) * b"), R::kSame, N,
                       "C's fmod: the remainder takes the dividend's sign"));
  ops.push_back(binary("remainder",
                       [](const Attrs&, DType d) {
                         return isFloating(d) ? "mod_f(a, b)" : d == DType::I64 ? "mod_l(a, b)" : d == DType::I32 ? "mod_i(a, b)" : "a % b";
                       },
                       R::kSame, N, "Python's modulo: the remainder takes the divisor's sign"));
  ops.push_back(binary("hypot", same("length(vec2(a, b))"), R::kSame, F, "sqrt(a^2 + b^2)"));
  ops.push_back(binary("copysign", same("(floatBitsToUint(b) >> 31) != 0u ? -abs(a) : abs(a)"), R::kFloat, N,
                       "|input| with the sign of other"));
  ops.push_back(binary("xlogy", same("(a == 0.0 && !isnan(b)) ? 0.0 : a * log(b)"), R::kFloat, N,
                       "input * log(other), 0 where input is 0"));
  ops.push_back(binary("logaddexp",
                       same("(isinf(a) && a == b) ? a : max(a, b) + log1p_f(exp(-abs(a - b)))"), R::kFloat, N,
                       "log(e^a + e^b), stable"));
  // ------------------------------------------------------------ comparisons and logic
  for (auto [name, sym] : std::initializer_list<std::pair<const char*, const char*>>{
           {"eq", "=="}, {"ne", "!="}, {"lt", "<"}, {"le", "<="}, {"gt", ">"}, {"ge", ">="}}) {
    std::string s = sym;
    ops.push_back(binary(name,
                         [s](const Attrs&, DType d) {
                           if (d == DType::Bool && s != "==" && s != "!=") return "int(a) " + s + " int(b)";
                           return "a " + s + " b";
                         },
                         R::kBool, kAllDTypes, std::string("input ") + sym + " other, as bool"));
  }
  ops.push_back(binary("logical_and", same("a && b"), R::kLogical, kAllDTypes, "both non-zero"));
  ops.push_back(binary("logical_or", same("a || b"), R::kLogical, kAllDTypes, "either non-zero"));
  ops.push_back(binary("logical_xor", same("a != b"), R::kLogical, kAllDTypes, "exactly one non-zero"));
  for (auto [name, sym, boolSym] : std::initializer_list<std::tuple<const char*, const char*, const char*>>{
           {"bitwise_and", "&", "&&"}, {"bitwise_or", "|", "||"}, {"bitwise_xor", "^", "!="}}) {
    std::string s = sym, bs = boolSym;
    ops.push_back(binary(name, [s, bs](const Attrs&, DType d) { return "a " + (d == DType::Bool ? bs : s) + " b"; },
                         R::kSame, kBits, std::string("input ") + sym + " other (ints and bool)"));
  }
  // ------------------------------------------------------------ ternary
  ops.push_back(op("where",
                   {{"condition", InputRole::kMask}, {"input"}, {"other", InputRole::kData, true}},
                   {scalarAttr("other", "the value where condition is false, as a number")}, kAllDTypes,
                   {.arity = 3,
                    .result = R::kSame,
                    .expr =
                        [](const Attrs&, DType d) {
                          std::string zero = d == DType::Bool ? "false" : isFloating(d) ? "0.0" : d == DType::I64 ? "0l" : d == DType::U8 ? "0u" : "0";
                          return "(a != " + zero + ") ? b : c";
                        }},
                   true, "input where condition, else other; all three broadcast"));
  ops.push_back(op("lerp", {{"input"}, {"end"}, {"weight", InputRole::kData, true}},
                   {scalarAttr("weight", "the weight as a number")}, F,
                   {.arity = 3, .result = R::kSame, .expr = same("a + c * (b - a)")}, true,
                   "input + weight * (end - input)"));
  ops.push_back(op("addcmul", {{"input"}, {"tensor1"}, {"tensor2"}},
                   {{"value", AttrType::kScalar, int64_t(1), "multiplier of tensor1 * tensor2"}}, N,
                   {.arity = 3, .params = {"value"}, .result = R::kSame, .expr = same("a + s0 * b * c")},
                   true, "input + value * tensor1 * tensor2"));
  ops.push_back(op("addcdiv", {{"input"}, {"tensor1"}, {"tensor2"}},
                   {{"value", AttrType::kScalar, int64_t(1), "multiplier of tensor1 / tensor2"}}, F,
                   {.arity = 3, .params = {"value"}, .result = R::kSame, .expr = same("a + s0 * b / c")},
                   true, "input + value * tensor1 / tensor2"));
}

}  // namespace tensord::compute
