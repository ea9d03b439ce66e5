// Backward ops of the elementwise family (see backwardOp in op_families.h
// for the calling convention). Unary ops' backwards are elementwise kernels
// themselves: grad * f'(input) over a = grad, b = input. Binary and ternary
// ops' backwards are graph programs: one elementwise kernel per partial
// derivative over the broadcast shape, then a sum back to each input's shape.

#include <cmath>

#include "compute/op_families.h"
#include "compute/template_elementwise.h"
#include "compute/template_graph.h"

namespace tensord::compute {
namespace {

using R = ElementwiseSpec::Result;
using ExprFn = std::function<std::string(const Attrs&, DType)>;

ExprFn same(std::string expr) {
  return [expr = std::move(expr)](const Attrs&, DType) { return expr; };
}

// The forward op's numeric attributes that always have a value, in order: the
// expressions see them as s0, s1, ... (Optional ones stand for operands.)
std::vector<std::string> numericAttrs(const OpSpec& fwd) {
  std::vector<std::string> names;
  for (const auto& a : fwd.attrs) {
    bool numeric = a.type == AttrType::kFloat || a.type == AttrType::kInt || a.type == AttrType::kScalar;
    if (numeric && a.defaultValue) names.push_back(a.name);
  }
  return names;
}

// NAME_backward(grad, input) = grad * f'(input), one kernel.
OpSpec unaryBackward(const OpSpec& fwd, ExprFn expr, std::string doc = "") {
  auto kernel = elementwise({.arity = 2, .params = numericAttrs(fwd), .result = R::kSame, .expr = std::move(expr)});
  return backwardOp(fwd, {{"grad"}, {"input"}}, {"input"}, std::move(kernel), std::move(doc));
}

// A partial derivative of a binary or ternary op as an elementwise kernel of
// its own: operands grad, then the forward op's inputs (absent ones are the
// scalar attributes of the same name, or `absent`).
std::shared_ptr<const OpSpec> partial(const OpSpec& fwd, const std::string& wrt, ExprFn expr,
                                      std::vector<double> absent = {}) {
  std::vector<InputSpec> inputs = {{"grad"}};
  for (const auto& in : fwd.inputs) inputs.push_back(in);
  absent.insert(absent.begin(), NAN);  // grad is required
  while (absent.size() < inputs.size()) absent.push_back(NAN);
  auto op = std::make_shared<OpSpec>(OpSpec{
      .name = fwd.name + "_backward:" + wrt,
      .category = fwd.category,
      .inputs = std::move(inputs),
      .outputs = {"out"},
      .attrs = fwd.attrs,
      .dtypes = kFloatDTypes,
      .kernel = elementwise({.arity = int(fwd.inputs.size()) + 1,
                             .params = numericAttrs(fwd),
                             .absent = std::move(absent),
                             .result = R::kFloat,
                             .expr = std::move(expr)}),
      .promote = true});
  return op;
}

StepAttrs given(const Attrs& attrs) {
  StepAttrs out;
  for (const auto& [k, v] : attrs.values()) out.emplace_back(k, v);
  return out;
}

// The backward of an op whose inputs all broadcast against each other: for
// each input in `wrt` (given as a tensor), its partial over the broadcast
// shape, summed back to the input's shape and brought to its dtype. A null
// partial means "grad itself" (no kernel).
OpSpec broadcastBackward(const OpTable& table, const OpSpec& fwd,
                         std::vector<std::pair<std::string, std::shared_ptr<const OpSpec>>> wrt, std::string doc = "") {
  std::vector<InputSpec> inputs = {{"grad"}};
  for (const auto& in : fwd.inputs) inputs.push_back(in);
  std::vector<std::string> grads;
  std::vector<std::shared_ptr<const OpSpec>> steps;
  for (const auto& [name, spec] : wrt) {
    grads.push_back(name);
    if (spec) steps.push_back(spec);
  }
  std::vector<std::string> names;  // `fwd` lives in a vector that still grows: keep what the program needs
  for (const auto& in : fwd.inputs) names.push_back(in.name);
  auto program = [names, wrt](Graph& g, const Attrs& attrs) {
    std::vector<Value> operands = {g.in("grad")};
    for (const auto& name : names) {
      if (!g.has(name)) break;  // optional inputs are trailing
      operands.push_back(g.in(name));
    }
    std::vector<Value> out;
    for (const auto& [name, spec] : wrt) {
      if (!g.has(name)) continue;
      Value x = g.in(name);
      Value d = spec ? g.call(*spec, operands, given(attrs)) : g.in("grad");
      out.push_back(g.to(g.sumTo(d, g.shape(x)), g.desc(x).dtype));
    }
    return out;
  };
  return backwardOp(fwd, std::move(inputs), grads, graphTemplate(table, program, std::move(steps)), std::move(doc));
}

struct Unary {
  const char* name;
  const char* derivative;  // grad * f'(x): a = grad, b = x, s0.. = attributes
};

}  // namespace

void addElementwiseBackwardOps(std::vector<OpSpec>& ops, const OpTable& table) {
  std::vector<OpSpec> out;
  auto fwd = [&](const char* name) -> const OpSpec& { return findOp(ops, name); };
  const char* kZero = "a * 0.0";  // piecewise constant: the gradient is 0 (NaN grad stays NaN)
  for (const Unary& u : std::initializer_list<Unary>{
           {"abs", "a * sign(b)"},
           {"neg", "-a"},
           {"sign", kZero},
           {"square", "2.0 * b * a"},
           {"floor", kZero},
           {"ceil", kZero},
           {"round", kZero},
           {"trunc", kZero},
           {"frac", "a"},
           {"relu", "b > 0.0 ? a : 0.0"},
           {"reciprocal", "-a / (b * b)"},
           {"sqrt", "a * 0.5 / sqrt(b)"},
           {"rsqrt", "-0.5 * a * inversesqrt(b) / b"},
           {"exp", "a * exp(b)"},
           {"exp2", "a * exp2(b) * 0.6931471805599453"},
           {"expm1", "a * exp(b)"},
           {"log", "a / b"},
           {"log2", "a / (b * 0.6931471805599453)"},
           {"log10", "a / (b * 2.302585092994046)"},
           {"log1p", "a / (1.0 + b)"},
           {"sin", "a * cos(b)"},
           {"cos", "-a * sin(b)"},
           {"tan", "a * (1.0 + tan(b) * tan(b))"},
           {"asin", "a * inversesqrt(1.0 - b * b)"},
           {"acos", "-a * inversesqrt(1.0 - b * b)"},
           {"atan", "a / (1.0 + b * b)"},
           {"sinh", "a * cosh(b)"},
           {"cosh", "a * sinh(b)"},
           {"tanh", "a * (1.0 - tanh(b) * tanh(b))"},
           {"asinh", "a * inversesqrt(b * b + 1.0)"},
           {"acosh", "a * inversesqrt(b * b - 1.0)"},
           {"atanh", "a / (1.0 - b * b)"},
           {"erf", "a * 1.1283791670955126 * exp(-b * b)"},
           {"erfc", "-a * 1.1283791670955126 * exp(-b * b)"},
           {"erfinv", "a * 0.886226925452758 * exp(erfinv_f(b) * erfinv_f(b))"},
           {"sigmoid", "a * sigmoid_f(b) * (1.0 - sigmoid_f(b))"},
           {"logsigmoid", "a * sigmoid_f(-b)"},
           {"silu", "a * sigmoid_f(b) * (1.0 + b * (1.0 - sigmoid_f(b)))"},
           {"mish",
            "a * (tanh(softplus_f(b, 1.0, 20.0)) + b * (1.0 - tanh(softplus_f(b, 1.0, 20.0)) * "
            "tanh(softplus_f(b, 1.0, 20.0))) * sigmoid_f(b))"},
           {"softsign", "a / ((1.0 + abs(b)) * (1.0 + abs(b)))"},
           {"selu", "b > 0.0 ? a * 1.0507009873554805 : a * 1.0507009873554805 * 1.6732632423543772 * exp(b)"},
           {"hardsigmoid", "(b > -3.0 && b < 3.0) ? a / 6.0 : 0.0"},
           {"hardswish", "b < -3.0 ? 0.0 : (b <= 3.0 ? a * (b / 3.0 + 0.5) : a)"},
           {"relu6", "(b > 0.0 && b < 6.0) ? a : 0.0"},
           {"leaky_relu", "b > 0.0 ? a : a * s0"},
           {"elu", "b > 0.0 ? a : a * s0 * exp(b)"},
           {"celu", "b > 0.0 ? a : a * exp(b / s0)"},
           {"softplus", "b * s0 > s1 ? a : a * sigmoid_f(b * s0)"},
           {"hardtanh", "(b > s0 && b < s1) ? a : 0.0"},
           {"nan_to_num", "(isnan(b) || isinf(b)) ? 0.0 : a"},
       }) {
    out.push_back(unaryBackward(fwd(u.name), same(u.derivative)));
  }
  out.push_back(unaryBackward(
      fwd("gelu"), [](const Attrs& attrs, DType) -> std::string {
        if (attrs.getText("approximate") == "tanh") {
          return "a * (0.5 * (1.0 + tanh(0.7978845608028654 * (b + 0.044715 * b * b * b))) + 0.5 * b * (1.0 - "
                 "tanh(0.7978845608028654 * (b + 0.044715 * b * b * b)) * tanh(0.7978845608028654 * (b + 0.044715 * "
                 "b * b * b))) * 0.7978845608028654 * (1.0 + 0.134145 * b * b))";
        }
        return "a * (0.5 * erfc_f(-0.7071067811865476 * b) + b * 0.3989422804014327 * exp(-0.5 * b * b))";
      }));

  // Identity and casts: the gradient passes through (back in the input's dtype).
  for (const char* name : {"clone", "to"}) {
    out.push_back(backwardOp(fwd(name), {{"grad", InputRole::kAny}, {"input", InputRole::kAny}}, {"input"},
                             graphTemplate(table, [](Graph& g, const Attrs&) {
                               return std::vector<Value>{g.to(g.in("grad"), g.desc(g.in("input")).dtype)};
                             }),
                             "grad, in the input's dtype."));
  }

  // Binary and ternary ops: partials over (a = grad, b = input, c = other/2nd, d = 3rd).
  auto bin = [&](const char* name, std::vector<std::pair<std::string, const char*>> partials,
                 std::vector<double> absent = {}) {
    const OpSpec& f = fwd(name);
    std::vector<std::pair<std::string, std::shared_ptr<const OpSpec>>> wrt;
    for (const auto& [input, expr] : partials) {
      wrt.emplace_back(input, expr ? partial(f, input, same(expr), absent) : nullptr);
    }
    out.push_back(broadcastBackward(table, f, std::move(wrt)));
  };
  bin("add", {{"input", nullptr}, {"other", "a * s0"}});
  bin("sub", {{"input", nullptr}, {"other", "-a * s0"}});
  bin("mul", {{"input", "a * c"}, {"other", "a * b"}});
  {
    const OpSpec& f = fwd("div");
    // Rounded division is piecewise constant.
    auto di = [](const Attrs& attrs, DType) -> std::string {
      return attrs.getText("rounding_mode") == "none" ? "a / c" : "a * 0.0";
    };
    auto dother = [](const Attrs& attrs, DType) -> std::string {
      return attrs.getText("rounding_mode") == "none" ? "-a * b / (c * c)" : "a * 0.0";
    };
    out.push_back(broadcastBackward(table, f, {{"input", partial(f, "input", di)}, {"other", partial(f, "other", dother)}}));
  }
  bin("pow", {{"input", "c == 0.0 ? 0.0 : a * c * pow_f(b, c - 1.0)"},
              {"exponent", "(b == 0.0 && c >= 0.0) ? 0.0 : a * pow_f(b, c) * log(b)"}});
  bin("atan2", {{"input", "a * c / (b * b + c * c)"}, {"other", "-a * b / (b * b + c * c)"}});
  bin("maximum", {{"input", "b > c ? a : (b == c ? 0.5 * a : 0.0)"}, {"other", "c > b ? a : (b == c ? 0.5 * a : 0.0)"}});
  bin("minimum", {{"input", "b < c ? a : (b == c ? 0.5 * a : 0.0)"}, {"other", "c < b ? a : (b == c ? 0.5 * a : 0.0)"}});
  bin("fmod", {{"input", nullptr}, {"other", "-a * trunc(b / c)"}});
  bin("remainder", {{"input", nullptr}, {"other", "-a * floor(b / c)"}});
  bin("hypot", {{"input", "a * b / length(vec2(b, c))"}, {"other", "a * c / length(vec2(b, c))"}});
  bin("copysign", {{"input", "b == 0.0 ? 0.0 : a * (((floatBitsToUint(c) >> 31) != 0u ? -abs(b) : abs(b)) / b)"},
                   {"other", "a * 0.0"}});
  bin("xlogy", {{"input", "b == 0.0 ? 0.0 : a * log(c)"}, {"other", "a * b / c"}});
  bin("logaddexp", {{"input", "a / (1.0 + exp(c - b))"}, {"other", "a / (1.0 + exp(b - c))"}});
  bin("where", {{"input", "b != 0.0 ? a : 0.0"}, {"other", "b != 0.0 ? 0.0 : a"}});
  bin("lerp", {{"input", "a * (1.0 - d)"}, {"end", "a * d"}, {"weight", "a * (c - b)"}});
  bin("addcmul", {{"input", nullptr}, {"tensor1", "a * s0 * d"}, {"tensor2", "a * s0 * c"}});
  bin("addcdiv", {{"input", nullptr}, {"tensor1", "a * s0 / d"}, {"tensor2", "-a * s0 * c / (d * d)"}});
  // clamp: the gradient goes to whichever of input, min, max the output is.
  bin("clamp",
      {{"input", "(b >= c && b <= d) ? a : 0.0"}, {"min", "b < c ? a : 0.0"}, {"max", "(b > d && b >= c) ? a : 0.0"}},
      {NAN, -INFINITY, INFINITY});
  bin("logit", {{"input", "c < 0.0 ? a / (b * (1.0 - b)) : ((b < c || b > 1.0 - c) ? 0.0 : a / (b * (1.0 - b)))"}},
      {NAN, -1.0});
  for (auto& op : out) ops.push_back(std::move(op));
}

}  // namespace tensord::compute
