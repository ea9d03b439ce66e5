#pragma once
// Convolution, pooling and resampling templates (ops_conv.cpp):
//
//   conv(spatial, transposed)  conv1d/conv2d, conv_transpose2d: a direct
//                              gather (kernels/conv.comp); each invocation
//                              sums, in f32 registers, a few neighbouring
//                              output channels at one output position
//   pool(kind, spatial)        max/avg/adaptive-avg pooling (kernels/pool.comp)
//   interpolate()              nearest, nearest-exact, bilinear resize of
//                              [N, C, H, W] (kernels/interpolate.comp)
//
// 1-D ops run the 2-D kernels with H = 1. Every op computes in f32 and
// converts on load and store (f16, bf16).

#include <memory>

#include "compute/kernel_templates.h"

namespace tensord::compute {

std::shared_ptr<const KernelTemplate> conv(int spatial, bool transposed);

enum class PoolKind { kMax, kAvg, kAdaptiveAvg };
std::shared_ptr<const KernelTemplate> pool(PoolKind kind, int spatial);

std::shared_ptr<const KernelTemplate> interpolate();

}  // namespace tensord::compute
