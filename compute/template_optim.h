#pragma once
// The optimizer templates (ops_optim.cpp): sgd / adam / adamw steps, one
// tensor or a list of them per call, clip_grad_norm_ and zero_. They write
// their inputs in place. Every kernel (kernels/optim.comp) walks a table of
// tensors, so one dispatch updates a whole list of parameters.

#include <memory>
#include <string>
#include <vector>

#include "compute/kernel_templates.h"

namespace tensord::compute {

enum class OptimizerKind { kSgd, kAdam, kAdamW };

// The inputs of one parameter's group in call order: param, grad, then the
// state tensors (the last is optional: sgd's momentum_buffer, adam's
// max_exp_avg_sq).
const std::vector<std::string>& optimizerGroupNames(OptimizerKind kind);

// One template serves both forms of a kind: NAME(param, grad, state...) and
// NAME_multi(tensors...), whose variadic input holds the groups back to back.
std::shared_ptr<const KernelTemplate> optimizerStepTemplate(OptimizerKind kind);

std::shared_ptr<const KernelTemplate> clipGradNormTemplate();
std::shared_ptr<const KernelTemplate> zeroTemplate();

}  // namespace tensord::compute
