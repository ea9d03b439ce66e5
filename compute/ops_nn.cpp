// The nn ops (torch.nn.functional names and semantics): softmax and
// log_softmax, the norms, embedding, dropout, the losses and
// scaled_dot_product_attention. Kernels: template_nn.cpp. Convolution,
// pooling and interpolation live in ops_conv.cpp.

#include "compute/op_families.h"
#include "compute/template_nn.h"

namespace tensord::compute {
namespace {

AttrSpec attr(std::string name, AttrType type, std::optional<AttrValue> value, std::string doc) {
  return {std::move(name), type, std::move(value), std::move(doc)};
}
AttrSpec optionalAttr(std::string name, AttrType type, std::string doc) {
  return {std::move(name), type, std::nullopt, std::move(doc), true};
}

OpSpec nnOp(std::string name, std::vector<InputSpec> inputs, std::vector<AttrSpec> attrs,
            std::shared_ptr<const KernelTemplate> kernel, std::string doc, std::vector<std::string> mutates = {}) {
  OpSpec op = singleOutputOp("nn", std::move(name), std::move(inputs), std::move(attrs), kFloatDTypes,
                             std::move(kernel), std::move(doc));
  op.mutates = std::move(mutates);
  return op;
}

InputSpec opt(std::string name, InputRole role = InputRole::kData) { return {std::move(name), role, true}; }

AttrSpec reduction(bool batchmean = false) {
  return attr("reduction", AttrType::kText, std::string("mean"),
              batchmean ? "'mean' | 'sum' | 'none' | 'batchmean' (sum / input.size(0))" : "'mean' | 'sum' | 'none'");
}

const char* kLossNote =
    " Computed in f32; 'mean' and 'sum' reduce in two passes (per-workgroup partials, then one final sum).";

}  // namespace

void addNnOps(std::vector<OpSpec>& ops) {
  const AttrSpec dim = attr("dim", AttrType::kInt, int64_t(-1), "the dim to normalize over");
  ops.push_back(nnOp("softmax", {{"input"}}, {dim}, softmaxTemplate(false),
                     "exp(x - max) / sum(exp(x - max)) along dim, in f32. PyTorch's optional 'dtype' is not taken."));
  ops.push_back(nnOp("log_softmax", {{"input"}}, {dim}, softmaxTemplate(true),
                     "x - logsumexp(x) along dim, in f32. PyTorch's optional 'dtype' is not taken."));

  const AttrSpec eps = attr("eps", AttrType::kFloat, 1e-5, "added to the variance");
  const AttrSpec nshape = attr("normalized_shape", AttrType::kInts, std::nullopt, "the trailing dims normalized over");
  ops.push_back(nnOp("layer_norm", {{"input"}, opt("weight"), opt("bias")}, {nshape, eps}, normTemplate(NormKind::kLayer),
                     "(x - mean) / sqrt(var + eps) * weight + bias over the trailing normalized_shape dims (biased "
                     "variance, f32 statistics). Optional inputs are positional: bias needs weight."));
  ops.push_back(nnOp("rms_norm", {{"input"}, opt("weight")},
                     {nshape, optionalAttr("eps", AttrType::kFloat, "added to the mean square; default: the dtype's machine epsilon")},
                     normTemplate(NormKind::kRms),
                     "x / sqrt(mean(x^2) + eps) * weight over the trailing normalized_shape dims."));
  ops.push_back(nnOp("group_norm", {{"input"}, opt("weight"), opt("bias")},
                     {attr("num_groups", AttrType::kInt, std::nullopt, "groups the channels (dim 1) split into"), eps},
                     normTemplate(NormKind::kGroup),
                     "Normalizes each (sample, channel group) of input [N, C, *], then applies per-channel weight and "
                     "bias. Optional inputs are positional: bias needs weight."));
  ops.push_back(nnOp(
      "batch_norm", {{"input"}, opt("running_mean"), opt("running_var"), opt("weight"), opt("bias")},
      {attr("training", AttrType::kBool, false, "normalize with batch statistics (and update the running ones)"),
       attr("momentum", AttrType::kFloat, 0.1, "running = (1 - momentum) * running + momentum * batch statistic"), eps},
      normTemplate(NormKind::kBatch),
      "Per-channel (dim 1) normalization of input [N, C, *]. training=true: batch mean and biased variance; when "
      "running_mean and running_var are given they are updated IN PLACE (unbiased variance, as PyTorch). "
      "training=false: the running statistics. Differs from PyTorch: optional inputs are positional, so weight and "
      "bias need the running statistics; the running statistics have the input's dtype.",
      {"running_mean", "running_var"}));

  ops.push_back(nnOp("embedding", {{"weight"}, {"indices", InputRole::kIndex}},
                     {optionalAttr("padding_idx", AttrType::kInt, "a row in [-rows, rows); affects only the gradient")},
                     embeddingTemplate(),
                     "out[..., :] = weight[indices[...], :]. Input order follows torch.embedding (weight, indices), "
                     "not F.embedding. An index outside [0, rows) fails the op (checked on the device)."));
  {
    OpSpec d = nnOp("dropout", {{"input"}},
                    {attr("p", AttrType::kFloat, 0.5, "probability of zeroing an element"),
                     attr("training", AttrType::kBool, true, "false: identity"),
                     attr("seed", AttrType::kInt, int64_t(0), "RNG seed; one seed gives one mask on every device")},
                    dropoutTemplate(),
                    "Zeroes each element with probability p and scales the rest by 1 / (1 - p). Differs from PyTorch: "
                    "the mask comes from a counter-based hash of (seed, element index), not the global generator, "
                    "so it is reproducible across devices and calls.");
    ops.push_back(std::move(d));
  }

  const std::string note = kLossNote;
  ops.push_back(nnOp("mse_loss", {{"input"}, {"target"}}, {reduction()}, lossTemplate(LossKind::kMse),
                     "(input - target)^2. Differs from PyTorch: target must have input's shape (no broadcasting)." + note));
  ops.push_back(nnOp("l1_loss", {{"input"}, {"target"}}, {reduction()}, lossTemplate(LossKind::kL1),
                     "|input - target|. Differs from PyTorch: target must have input's shape (no broadcasting)." + note));
  ops.push_back(nnOp("smooth_l1_loss", {{"input"}, {"target"}},
                     {reduction(), attr("beta", AttrType::kFloat, 1.0, "where the loss turns from quadratic to linear")},
                     lossTemplate(LossKind::kSmoothL1),
                     "0.5 d^2 / beta if d < beta else d - 0.5 beta, d = |input - target| (beta 0: l1). Target must "
                     "have input's shape." + note));
  ops.push_back(nnOp("binary_cross_entropy", {{"input"}, {"target"}, opt("weight")}, {reduction()},
                     lossTemplate(LossKind::kBce),
                     "-weight (t log x + (1 - t) log(1 - x)), logs clamped at -100 as PyTorch; weight broadcasts to "
                     "input. Input outside [0, 1] gives NaN rather than an error." + note));
  ops.push_back(nnOp("binary_cross_entropy_with_logits", {{"input"}, {"target"}, opt("weight"), opt("pos_weight")},
                     {reduction()}, lossTemplate(LossKind::kBceLogits),
                     "Numerically stable BCE on logits; pos_weight weights the positive term, weight the whole. Both "
                     "broadcast to input; optional inputs are positional (pos_weight needs weight)." + note));
  ops.push_back(nnOp("kl_div", {{"input"}, {"target"}},
                     {reduction(true), attr("log_target", AttrType::kBool, false, "target holds log-probabilities")},
                     lossTemplate(LossKind::kKlDiv),
                     "target (log target - input) (xlogy, so target 0 gives 0); input holds log-probabilities." + note));
  const AttrSpec ignore = attr("ignore_index", AttrType::kInt, int64_t(-100), "targets with this value contribute nothing");
  ops.push_back(nnOp("nll_loss", {{"input"}, {"target", InputRole::kIndex}, opt("weight")}, {reduction(), ignore},
                     lossTemplate(LossKind::kNll),
                     "-weight[t] input[n, t, ...] for log-probabilities input [N, C, d...] (or [C]) and class "
                     "indices target [N, d...]; 'mean' divides by the summed weights of the non-ignored targets. A "
                     "target outside [0, C) fails the op (checked on the device)." + note));
  ops.push_back(nnOp("cross_entropy", {{"input"}, {"target", InputRole::kIndex}, opt("weight")},
                     {reduction(), ignore,
                      attr("label_smoothing", AttrType::kFloat, 0.0, "mixes the target with the uniform distribution")},
                     lossTemplate(LossKind::kCrossEntropy),
                     "nll_loss(log_softmax(input, 1), target) with PyTorch's weight, ignore_index and label_smoothing "
                     "rules. Differs from PyTorch: target must hold class indices (no class probabilities)." + note));

  ops.push_back(nnOp(
      "scaled_dot_product_attention",
      {{"query"}, {"key"}, {"value"}, opt("attn_mask", InputRole::kAny)},
      {attr("dropout_p", AttrType::kFloat, 0.0, "must be 0: tensord applies no dropout here"),
       attr("is_causal", AttrType::kBool, false, "mask out keys after the query (top-left aligned)"),
       optionalAttr("scale", AttrType::kFloat, "default 1 / sqrt(E)")},
      attentionTemplate(),
      "softmax(q k^T * scale + mask) v for query [..., L, E], key [..., S, E], value [..., S, Ev] (batch dims "
      "broadcast). attn_mask broadcasts to [..., L, S]: bool (true = attend) or query's dtype (added). Differs from "
      "PyTorch: dropout_p must be 0; a fully masked row gives zeros (as PyTorch's math backend since 2.5)."));
}

}  // namespace tensord::compute
