#pragma once
// Kernel templates of the conv family's backward ops (ops_backward_conv.cpp).
// They take the forward's geometry from template_conv.h, so they invert
// exactly what the forward kernels compute:
//
//   convWeightGrad(spatial, transposed)  a graph step of conv*_backward:
//       (grad, input, weight) -> partial sums [weight..., chunks] (f32) of
//       the weight gradient over chunks of positions; the caller sums the
//       last dim (kernels/conv_backward.comp)
//   poolBackward(kind, spatial)          (grad, input) -> grad_input, a
//       gather per input element over the windows holding it; max pooling
//       first records each window's argmax (kernels/pool_backward.comp)
//   interpolateBackward()                (grad, input) -> grad_input, a
//       gather per input element (kernels/interpolate_backward.comp)
//
// No atomics: every output element is written once by one invocation.

#include <memory>

#include "compute/kernel_templates.h"
#include "compute/template_conv.h"

namespace tensord::compute {

std::shared_ptr<const KernelTemplate> convWeightGrad(int spatial, bool transposed);
std::shared_ptr<const KernelTemplate> poolBackward(PoolKind kind, int spatial);
std::shared_ptr<const KernelTemplate> interpolateBackward();

}  // namespace tensord::compute
