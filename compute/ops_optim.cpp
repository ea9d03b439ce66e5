// Optimizer steps as ops: they update parameters and their state in place.
// torch.optim's update rules (the single-tensor "for-loop" implementation),
// one parameter per call (sgd, adam, adamw) or a list of them in one
// dispatch (NAME_multi); plus torch.nn.utils.clip_grad_norm_ and zero_.
// The client keeps the state tensors and counts the steps. Kernels:
// template_optim.cpp.

#include "compute/op_families.h"
#include "compute/template_optim.h"

namespace tensord::compute {
namespace {

AttrSpec attr(std::string name, AttrType type, std::optional<AttrValue> value, std::string doc) {
  return {std::move(name), type, std::move(value), std::move(doc)};
}

// An op that only writes its inputs: no outputs unless given, not differentiable.
OpSpec inPlaceOp(std::string name, std::vector<InputSpec> inputs, std::vector<AttrSpec> attrs,
                 std::vector<DType> dtypes, std::shared_ptr<const KernelTemplate> kernel, std::string doc,
                 std::vector<std::string> mutates, std::vector<std::string> outputs = {}) {
  return {.name = std::move(name),
          .category = "optim",
          .inputs = std::move(inputs),
          .outputs = std::move(outputs),
          .attrs = std::move(attrs),
          .dtypes = std::move(dtypes),
          .kernel = std::move(kernel),
          .backward = "",
          .doc = std::move(doc),
          .mutates = std::move(mutates),
          .differentiable = false};
}

// The per-parameter inputs of `kind`, the last (a state tensor) optional.
std::vector<InputSpec> groupInputs(OptimizerKind kind) {
  std::vector<InputSpec> inputs;
  for (const auto& name : optimizerGroupNames(kind)) inputs.push_back({name});
  inputs.back().optional = true;
  return inputs;
}

// Everything but the grad is written.
std::vector<std::string> groupMutates(OptimizerKind kind) {
  std::vector<std::string> names = optimizerGroupNames(kind);
  names.erase(names.begin() + 1);
  return names;
}

// NAME_multi: the same step over a list of parameters, in one dispatch.
OpSpec multiOp(const OpSpec& single, const std::string& group) {
  OpSpec op = single;
  op.name += "_multi";
  op.inputs = {{.name = "tensors", .role = InputRole::kAny, .variadic = true}};
  op.mutates = {"tensors"};
  op.doc = single.name +
           " over a list of parameters in one call and one dispatch: 'tensors' holds their groups "
           "back to back, " +
           group +
           ", each with the single op's rules (a group's tensors share "
           "param's shape and dtype; groups may differ). Params and states are written IN PLACE (the "
           "grads are only read but count as written for access checks and ordering). A tensor given "
           "twice is updated twice, in order.";
  return op;
}

const char* kPrecision =
    " f16/bf16: math in f32, rounded only where a tensor is stored (PyTorch rounds each intermediate).";

}  // namespace

void addOptimizerOps(std::vector<OpSpec>& ops) {
  const AttrSpec lr = attr("lr", AttrType::kFloat, 1e-3, "learning rate, >= 0");
  const AttrSpec maximize = attr("maximize", AttrType::kBool, false, "ascend: the gradient is negated first");

  OpSpec sgd = inPlaceOp(
      "sgd", groupInputs(OptimizerKind::kSgd),
      {lr, attr("momentum", AttrType::kFloat, 0.0, "momentum factor, >= 0; non-zero needs momentum_buffer"),
       attr("dampening", AttrType::kFloat, 0.0, "dampening of the gradient's share in the momentum"),
       attr("nesterov", AttrType::kBool, false, "Nesterov momentum (needs momentum > 0, dampening 0)"),
       attr("weight_decay", AttrType::kFloat, 0.0, "L2 penalty, >= 0, added to the gradient"), maximize,
       attr("step", AttrType::kInt, int64_t(1), "1-based number of this step; step 1 initialises momentum_buffer")},
      kFloatDTypes, optimizerStepTemplate(OptimizerKind::kSgd),
      std::string("One torch.optim.SGD step, IN PLACE: g = grad (negated if maximize) + weight_decay * param; "
                  "with momentum, momentum_buffer = g on step 1, else momentum * buf + (1 - dampening) * g, and g = "
                  "buf (nesterov: g + momentum * buf); param -= lr * g. Writes param and momentum_buffer (param's "
                  "shape and dtype), returns nothing. Differs from PyTorch: the client passes the step number "
                  "instead of an empty buffer on the first step.") +
          kPrecision,
      groupMutates(OptimizerKind::kSgd));

  const std::vector<AttrSpec> adamAttrs = {
      lr,
      attr("beta1", AttrType::kFloat, 0.9, "decay of the gradient's running average, in [0, 1)"),
      attr("beta2", AttrType::kFloat, 0.999, "decay of the squared gradient's running average, in [0, 1)"),
      attr("eps", AttrType::kFloat, 1e-8, "added to the denominator, >= 0"),
      attr("weight_decay", AttrType::kFloat, 0.0, "L2 penalty, >= 0, added to the gradient"),
      attr("amsgrad", AttrType::kBool, false, "use the running maximum of exp_avg_sq (needs max_exp_avg_sq)"),
      maximize,
      attr("step", AttrType::kInt, std::nullopt,
           "1-based number of this step (the client counts), for the bias corrections")};
  const std::string adamRule =
      "m = lerp(exp_avg, g, 1 - beta1); v = beta2 * exp_avg_sq + (1 - beta2) * g^2 (amsgrad: max_exp_avg_sq = "
      "max(max_exp_avg_sq, v), used for v); param -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) "
      "+ eps). Writes param and the state tensors (param's shape and dtype; zeros before step 1), returns nothing.";
  OpSpec adam = inPlaceOp("adam", groupInputs(OptimizerKind::kAdam), adamAttrs, kFloatDTypes,
                          optimizerStepTemplate(OptimizerKind::kAdam),
                          "One torch.optim.Adam step, IN PLACE: g = grad (negated if maximize) + weight_decay * "
                          "param; " +
                              adamRule + kPrecision,
                          groupMutates(OptimizerKind::kAdam));
  std::vector<AttrSpec> adamwAttrs = adamAttrs;
  adamwAttrs[4] =
      attr("weight_decay", AttrType::kFloat, 0.01, "decoupled weight decay, >= 0: param *= 1 - lr * weight_decay");
  OpSpec adamw = inPlaceOp("adamw", groupInputs(OptimizerKind::kAdamW), adamwAttrs, kFloatDTypes,
                           optimizerStepTemplate(OptimizerKind::kAdamW),
                           "One torch.optim.AdamW step, IN PLACE: param *= 1 - lr * weight_decay; g = grad (negated "
                           "if maximize); " +
                               adamRule + kPrecision,
                           groupMutates(OptimizerKind::kAdamW));

  ops.push_back(multiOp(sgd, "(param, grad) or, with momentum != 0, (param, grad, momentum_buffer)"));
  ops.push_back(multiOp(adam, "(param, grad, exp_avg, exp_avg_sq) or, with amsgrad, (..., max_exp_avg_sq)"));
  ops.push_back(multiOp(adamw, "(param, grad, exp_avg, exp_avg_sq) or, with amsgrad, (..., max_exp_avg_sq)"));
  ops.push_back(std::move(sgd));
  ops.push_back(std::move(adam));
  ops.push_back(std::move(adamw));

  ops.push_back(inPlaceOp(
      "clip_grad_norm_", {{.name = "grads", .role = InputRole::kAny, .variadic = true}},
      {attr("max_norm", AttrType::kFloat, std::nullopt, "the largest total norm left unscaled"),
       attr("norm_type", AttrType::kFloat, 2.0, "p of the p-norm: > 0, or inf (the largest |element|)"),
       attr("error_if_nonfinite", AttrType::kBool, false, "fail the op when the total norm is NaN or infinite")},
      kFloatDTypes, clipGradNormTemplate(),
      "torch.nn.utils.clip_grad_norm_: total_norm = the p-norm of all grads together; every grad is scaled IN PLACE "
      "by min(max_norm / (total_norm + 1e-6), 1). Computed on the device in f32 (no host round trip); grads may "
      "mix f32, f16 and bf16. Differs from PyTorch: total_norm is f32 whatever the grads' dtype; norm_type must "
      "be > 0 or inf. With error_if_nonfinite the op fails before scaling, and the grads, which it writes, count as "
      "failed like any output of a failed call.",
      {"grads"}, {"total_norm"}));

  ops.push_back(inPlaceOp("zero_", {{"input"}}, {}, kAllDTypes, zeroTemplate(),
                          "Fills input with zeros IN PLACE (any dtype); returns nothing. Tensor.zero_.", {"input"}));
}

}  // namespace tensord::compute
