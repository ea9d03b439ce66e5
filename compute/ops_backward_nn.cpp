// Backward ops of the nn family (see backwardOp in op_families.h for the
// calling convention). softmax, the norms and the class losses have fused
// kernels of their own (template_nn_backward.h); the elementwise losses are
// one elementwise kernel per partial derivative; dropout is dropout again;
// embedding sorts its indices and gathers; attention is a graph of matmuls
// around one fused softmax step.

#include <cmath>

#include "compute/op_families.h"
#include "compute/template_elementwise.h"
#include "compute/template_graph.h"
#include "compute/template_nn_backward.h"

namespace tensord::compute {
namespace {

using R = ElementwiseSpec::Result;
using ExprFn = std::function<std::string(const Attrs&, DType)>;

ExprFn same(std::string expr) {
  return [expr = std::move(expr)](const Attrs&, DType) { return expr; };
}

StepAttrs given(const Attrs& attrs) {
  StepAttrs out;
  for (const auto& [k, v] : attrs.values()) out.emplace_back(k, v);
  return out;
}

// A copy of the forward op: `ops` still grows, so programs keep their own.
std::shared_ptr<const OpSpec> forwardOf(const std::vector<OpSpec>& ops, std::string_view name) {
  return std::make_shared<OpSpec>(findOp(ops, name));
}

// The forward op's outputs for the forward inputs among the graph's inputs
// (all but the grads), after the forward's own checks.
std::vector<TensorDesc> forwardOutputsOf(Graph& g, const OpSpec& fwd, const Attrs& attrs) {
  std::vector<TensorDesc> in;
  for (const auto& spec : fwd.inputs) {
    for (Value v : g.ins(spec.name)) in.push_back(g.desc(v));
  }
  return forwardOutputs(g.op(), fwd, in, attrs);
}

// Inputs of a backward that takes the gradient and every forward input.
std::vector<InputSpec> gradAndInputs(const OpSpec& fwd) {
  std::vector<InputSpec> inputs = {{"grad"}};
  inputs.insert(inputs.end(), fwd.inputs.begin(), fwd.inputs.end());
  return inputs;
}

// ------------------------------------------------------------ elementwise losses

// How an elementwise loss's partials see their operands: a = grad (times
// weight when `weightIntoGrad`), b = input, c = target, d = `extra` (the
// optional input named so, 1 when absent); s0 = 1 / the 'mean' or
// 'batchmean' divisor (else 1), s1.. = the forward's float attributes.
struct LossPartials {
  const char* op;
  const char* extra;    // nullptr: none
  bool weightIntoGrad;  // bce_with_logits: weight and pos_weight make five operands, one too many
  ExprFn dInput, dTarget;
};

std::shared_ptr<const OpSpec> lossPartial(const OpSpec& fwd, const LossPartials& l, const std::string& wrt,
                                          ExprFn expr) {
  std::vector<InputSpec> inputs = {{"grad"}, {"input"}, {"target"}};
  std::vector<double> absent = {NAN, NAN, NAN};
  if (l.extra) {
    inputs.push_back({l.extra, InputRole::kData, true});
    absent.push_back(1.0);
  }
  std::vector<AttrSpec> attrs = fwd.attrs;
  attrs.push_back({"scale", AttrType::kFloat, 1.0, "1 / the reduction's divisor"});
  std::vector<std::string> params = {"scale"};
  for (const auto& a : fwd.attrs) {
    if (a.type == AttrType::kFloat && a.defaultValue) params.push_back(a.name);
  }
  const int arity = int(inputs.size());
  return std::make_shared<OpSpec>(OpSpec{.name = fwd.name + "_backward:" + wrt,
                                         .category = fwd.category,
                                         .inputs = std::move(inputs),
                                         .outputs = {"out"},
                                         .attrs = std::move(attrs),
                                         .dtypes = fwd.dtypes,
                                         .kernel = elementwise({.arity = arity,
                                                                .params = std::move(params),
                                                                .absent = std::move(absent),
                                                                .result = R::kFloat,
                                                                .expr = std::move(expr)}),
                                         .promote = true});
}

OpSpec elementwiseLossBackward(const OpTable& table, const std::vector<OpSpec>& ops, const LossPartials& l) {
  auto fwd = forwardOf(ops, l.op);
  auto dx = lossPartial(*fwd, l, "input", l.dInput);
  auto dt = lossPartial(*fwd, l, "target", l.dTarget);
  const std::string extra = l.extra ? l.extra : "";
  const bool weightIntoGrad = l.weightIntoGrad;
  auto program = [fwd, dx, dt, extra, weightIntoGrad](Graph& g, const Attrs& attrs) {
    const auto out = forwardOutputsOf(g, *fwd, attrs);
    Value grad = g.in("grad"), x = g.in("input"), t = g.in("target");
    g.expectShape(grad, out[0].shape, "grad");
    const TensorDesc xd = g.desc(x), td = g.desc(t);
    const std::string& red = attrs.getText("reduction");
    double divisor = 1;
    if (red == "mean") divisor = double(xd.numel());
    if (red == "batchmean") divisor = xd.rank() == 0 ? 1 : double(xd.shape[0]);
    StepAttrs step = given(attrs);
    step.emplace_back("scale", divisor == 0 ? 0.0 : 1.0 / divisor);
    Value a = grad;
    if (weightIntoGrad && g.has("weight")) a = g.mul(grad, g.in("weight"));
    std::vector<Value> operands = {a, x, t};
    if (!extra.empty() && g.has(extra)) operands.push_back(g.in(extra));
    return std::vector<Value>{g.to(g.call(*dx, operands, step), xd.dtype), g.to(g.call(*dt, operands, step), td.dtype)};
  };
  return backwardOp(*fwd, gradAndInputs(*fwd), {"input", "target"}, graphTemplate(table, program, {dx, dt}),
                    "Gradients for input and target (weight and pos_weight get none, as in PyTorch).");
}

// ------------------------------------------------------------ embedding

OpSpec embeddingBackward(const OpTable& table, const std::vector<OpSpec>& ops) {
  auto fwd = forwardOf(ops, "embedding");
  auto gatherSum = std::make_shared<OpSpec>(OpSpec{
      .name = "embedding_backward:gather_sum",
      .category = "nn",
      .inputs = {{"grad"}, {"sorted", InputRole::kIndex}, {"perm", InputRole::kIndex}},
      .outputs = {"out"},
      .attrs = {{"rows", AttrType::kInt, std::nullopt, "rows of the table"},
                {"padding_idx", AttrType::kInt, std::nullopt, "the row that gets zeros", true}},
      .dtypes = kFloatDTypes,
      .kernel = embeddingGatherSumTemplate()});
  auto program = [fwd, gatherSum](Graph& g, const Attrs& attrs) {
    const auto out = forwardOutputsOf(g, *fwd, attrs);
    Value grad = g.in("grad"), w = g.in("weight"), idx = g.in("indices");
    g.expectShape(grad, out[0].shape, "grad");
    const Shape ws = g.shape(w);
    const int64_t n = g.desc(idx).numel();
    if (n == 0) return std::vector<Value>{g.zerosLike(w)};
    auto sorted = g.callN("sort", {g.reshape(idx, {n})});
    StepAttrs step = {{"rows", ws[0]}};
    if (attrs.has("padding_idx")) step.emplace_back("padding_idx", attrs.getInt("padding_idx"));
    return std::vector<Value>{g.call(*gatherSum, {g.reshape(grad, {n, ws[1]}), sorted[0], sorted[1]}, step)};
  };
  return backwardOp(*fwd, {{"grad"}, {"weight"}, {"indices", InputRole::kIndex}}, {"weight"},
                    graphTemplate(table, program, {gatherSum}),
                    "Sums grad rows into the rows their indices name (padding_idx's row gets zeros). No atomics: "
                    "one stable sort of the n indices, then each table element binary-searches its run, "
                    "O(n log n + rows * dim * log n + n * dim); deterministic.");
}

// ------------------------------------------------------------ attention

OpSpec attentionBackward(const OpTable& table, const std::vector<OpSpec>& ops) {
  auto fwd = forwardOf(ops, "scaled_dot_product_attention");
  auto softmaxStep = std::make_shared<OpSpec>(OpSpec{
      .name = "scaled_dot_product_attention_backward:softmax",
      .category = "nn",
      .inputs = {{"scores"}, {"dp"}},
      .outputs = {"p", "ds"},
      .attrs = {{"is_causal", AttrType::kBool, false, "mask out keys after the query"}},
      .dtypes = kFloatDTypes,
      .kernel = attentionSoftmaxBackwardTemplate()});
  // S = (q * scale) k^T + mask, P = softmax(S), out = P v. With grad = dO:
  // dV = P^T dO, dS = P (dO v^T - rowsum(...)), dQ = dS k * scale,
  // dK = dS^T (q * scale), dMask = dS. Products with a transposed [L, S]
  // operand are taken transposed ((dO^T P)^T), so only the small [.., E]
  // tensors are ever transposed (a copy).
  auto program = [fwd, softmaxStep](Graph& g, const Attrs& attrs) {
    const auto out = forwardOutputsOf(g, *fwd, attrs);
    Value grad = g.in("grad"), q = g.in("query"), k = g.in("key"), v = g.in("value");
    g.expectShape(grad, out[0].shape, "grad");
    const TensorDesc qd = g.desc(q), kd = g.desc(k), vd = g.desc(v);
    const int64_t E = qd.shape.back();
    const double scale = attrs.has("scale") ? attrs.getFloat("scale") : 1.0 / std::sqrt(double(std::max<int64_t>(E, 1)));
    auto mm = [&](Value a, Value b) { return g.call("matmul", {a, b}); };
    auto t = [&](Value a) { return g.transpose(a, -2, -1); };

    Value qs = g.mul(q, scale);
    Value scores = mm(qs, t(k));
    if (g.has("attn_mask")) {
      Value m = g.in("attn_mask");
      scores = g.desc(m).dtype == DType::Bool ? g.call("where", {m, scores}, {{"other", double(-INFINITY)}}) : g.add(scores, m);
    }
    Value dp = mm(grad, t(v));
    const Shape full = g.shape(dp);
    if (g.shape(scores) != full) scores = g.expand(scores, full);  // v's batch dims broadcast the scores
    auto pds = g.callSpec(*softmaxStep, {scores, dp}, {{"is_causal", attrs.getBool("is_causal")}});
    Value p = pds[0], ds = pds[1];
    Value dq = g.mul(mm(ds, k), scale);
    Value dk = t(mm(t(qs), ds));
    Value dv = t(mm(t(grad), p));
    std::vector<Value> res = {g.to(g.sumTo(dq, qd.shape), qd.dtype), g.to(g.sumTo(dk, kd.shape), kd.dtype),
                              g.to(g.sumTo(dv, vd.shape), vd.dtype)};
    if (g.has("attn_mask")) {
      Value m = g.in("attn_mask");
      const TensorDesc md = g.desc(m);
      res.push_back(md.dtype == DType::Bool ? g.zerosLike(m) : g.to(g.sumTo(ds, md.shape), md.dtype));
    }
    return res;
  };
  return backwardOp(*fwd, gradAndInputs(*fwd), {"query", "key", "value", "attn_mask"},
                    graphTemplate(table, program, {softmaxStep}),
                    "Recomputes the probabilities; products on the matmul kernel. A float attn_mask gets its "
                    "gradient (summed over its broadcast dims) as in PyTorch; a bool one gets all-false zeros.");
}

}  // namespace

void addNnBackwardOps(std::vector<OpSpec>& ops, const OpTable& table) {
  std::vector<OpSpec> out;
  auto fwd = [&](const char* name) -> const OpSpec& { return findOp(ops, name); };

  out.push_back(backwardOp(fwd("softmax"), {{"grad"}, {"out"}}, {"input"}, softmaxBackwardTemplate(false),
                           "From the forward's output y: y (grad - sum(grad y)) along dim, one fused kernel."));
  out.push_back(backwardOp(fwd("log_softmax"), {{"grad"}, {"out"}}, {"input"}, softmaxBackwardTemplate(true),
                           "From the forward's output y: grad - exp(y) sum(grad) along dim, one fused kernel."));

  const char* kNormDoc =
      "One fused kernel recomputes each row's statistics and writes grad_input; weight and bias gradients are "
      "chunked column sums (no atomics).";
  out.push_back(backwardOp(fwd("layer_norm"), gradAndInputs(fwd("layer_norm")), {"input", "weight", "bias"},
                           normBackwardTemplate(NormKind::kLayer, forwardOf(ops, "layer_norm")), kNormDoc));
  out.push_back(backwardOp(fwd("rms_norm"), gradAndInputs(fwd("rms_norm")), {"input", "weight"},
                           normBackwardTemplate(NormKind::kRms, forwardOf(ops, "rms_norm")), kNormDoc));
  out.push_back(backwardOp(fwd("group_norm"), gradAndInputs(fwd("group_norm")), {"input", "weight", "bias"},
                           normBackwardTemplate(NormKind::kGroup, forwardOf(ops, "group_norm")), kNormDoc));
  out.push_back(backwardOp(fwd("batch_norm"), gradAndInputs(fwd("batch_norm")), {"input", "weight", "bias"},
                           normBackwardTemplate(NormKind::kBatch, forwardOf(ops, "batch_norm")),
                           "training=true differentiates through the batch statistics; training=false treats the "
                           "running statistics as constants. running_mean/var get no gradient. One fused kernel "
                           "per channel."));

  out.push_back(embeddingBackward(table, ops));
  out.push_back(backwardOp(fwd("dropout"), {{"grad"}}, {"input"},
                           graphTemplate(table,
                                         [](Graph& g, const Attrs& attrs) {
                                           return std::vector<Value>{g.call("dropout", {g.in("grad")}, given(attrs))};
                                         }),
                           "dropout(grad) under the same seed: the mask comes again from (seed, index), so only grad is taken."));

  for (const LossPartials& l : std::initializer_list<LossPartials>{
           {"mse_loss", nullptr, false, same("2.0 * s0 * a * (b - c)"), same("-2.0 * s0 * a * (b - c)")},
           {"l1_loss", nullptr, false, same("s0 * a * sign(b - c)"), same("-s0 * a * sign(b - c)")},
           {"smooth_l1_loss", nullptr, false, same("s0 * a * (abs(b - c) < s1 ? (b - c) / s1 : sign(b - c))"),
            same("-s0 * a * (abs(b - c) < s1 ? (b - c) / s1 : sign(b - c))")},
           // The logs are clamped at -100 as in the forward.
           {"binary_cross_entropy", "weight", false, same("s0 * a * d * (b - c) / max(b * (1.0 - b), 1e-12)"),
            same("s0 * a * d * (max(log(1.0 - b), -100.0) - max(log(b), -100.0))")},
           // l = (1 - t) x + (1 + (pw - 1) t) log(1 + exp(-x)); d = pos_weight.
           {"binary_cross_entropy_with_logits", "pos_weight", true,
            same("s0 * a * (1.0 - c - (1.0 + (d - 1.0) * c) * sigmoid_f(-b))"),
            same("s0 * a * ((d - 1.0) * (log1p_f(exp(-abs(b))) + max(-b, 0.0)) - b)")},
           {"kl_div", nullptr, false,
            [](const Attrs& attrs, DType) -> std::string {
              return attrs.getBool("log_target") ? "-s0 * a * exp(c)" : "-s0 * a * c";
            },
            [](const Attrs& attrs, DType) -> std::string {
              return attrs.getBool("log_target") ? "s0 * a * exp(c) * (c - b + 1.0)"
                                                 : "c == 0.0 ? 0.0 : s0 * a * (log(c) + 1.0 - b)";
            }},
       }) {
    out.push_back(elementwiseLossBackward(table, ops, l));
  }
  out.push_back(backwardOp(fwd("nll_loss"), gradAndInputs(fwd("nll_loss")), {"input"},
                           classLossBackwardTemplate(LossKind::kNll, forwardOf(ops, "nll_loss")),
                           "-grad * weight[target] at the target class; weight gets no gradient, as in PyTorch."));
  out.push_back(backwardOp(fwd("cross_entropy"), gradAndInputs(fwd("cross_entropy")), {"input"},
                           classLossBackwardTemplate(LossKind::kCrossEntropy, forwardOf(ops, "cross_entropy")),
                           "softmax minus the (smoothed, weighted) target in one fused kernel per sample; weight "
                           "gets no gradient, as in PyTorch."));
  out.push_back(attentionBackward(table, ops));
  for (auto& op : out) ops.push_back(std::move(op));
}

}  // namespace tensord::compute
