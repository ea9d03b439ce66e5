#pragma once
// The creation template: tensors made from attributes alone (zeros, arange,
// eye, rand ...) or shaped like an input (zeros_like, bernoulli, multinomial).
// One kernel file, kernels/creation.comp, serves every kind but multinomial
// (kernels/creation_multinomial.comp); random kinds use the counter-based
// Philox4x32-10 generator of kernels/random.glsl keyed by the `seed`
// attribute, so a seed gives the same numbers on every device.

#include <memory>

#include "compute/kernel_templates.h"

namespace tensord::compute {

enum class CreationKind {
  kFill,         // zeros, ones, full: attribute `size`, value fixed or `fill_value`
  kFillLike,     // zeros_like, ones_like, full_like: input's shape (and dtype unless `dtype`)
  kArange,       // start, end, step
  kLinspace,     // start, end, steps
  kEye,          // n, m
  kRand,         // uniform [0, 1)
  kRandn,        // standard normal (Box-Muller)
  kRandint,      // uniform integers in [low, high)
  kBernoulli,    // input p: 1 with probability p
  kMultinomial,  // input weights [n] or [B, n]: i64 category indices
};

// `value`: the fill value of zeros/ones (NaN: the `fill_value` attribute).
std::shared_ptr<const KernelTemplate> creation(CreationKind kind, double value = 0);

}  // namespace tensord::compute
