#pragma once
// Convolution, pooling and resampling templates (ops_conv.cpp):
//
//   conv(spatial, transposed)  conv1d/conv2d, conv_transpose1d/2d: an
//                              implicit GEMM (kernels/conv_gemm.comp; output
//                              channels x output pixels, K = input channels
//                              x taps, the input tile gathered on the fly,
//                              a transposed conv split into one stride-1
//                              conv per output phase) where a group has at
//                              least 16 output channels and 16 products per
//                              output; else a direct gather (kernels/
//                              conv.comp): each invocation sums, in f32
//                              registers, a few neighbouring output
//                              channels at one output position
//   pool(kind, spatial)        max/avg/adaptive-avg pooling (kernels/pool.comp)
//   interpolate()              nearest, nearest-exact, bilinear resize of
//                              [N, C, H, W] (kernels/interpolate.comp)
//
// 1-D ops run the 2-D kernels with H = 1. Every op computes in f32 and
// converts on load and store (f16, bf16).

#include <memory>
#include <span>

#include "compute/kernel_templates.h"

namespace tensord::compute {

std::shared_ptr<const KernelTemplate> conv(int spatial, bool transposed);

enum class PoolKind { kMax, kAvg, kAdaptiveAvg };
std::shared_ptr<const KernelTemplate> pool(PoolKind kind, int spatial);

std::shared_ptr<const KernelTemplate> interpolate();

// The geometry of one call, worked out (and checked, errors naming `op`) as
// the forward kernels do; their backward ops (template_conv_backward.cpp)
// invert exactly this.

// An input [batch..., channels, spatial...] as (N, C, H, W); H = 1 for 1-D ops.
struct Planes {
  int64_t n = 1, c = 1, h = 1, w = 1;
  bool batched = true;
};

struct ConvGeometry {
  Planes in;
  int64_t o = 0, kh = 1, kw = 1, oh = 1, ow = 1;
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, groups = 1;
  bool bias = false;
  Shape out;
};
// `in`: input, weight and (optionally) bias.
ConvGeometry convGeometry(const OpSpec& op, int spatial, bool transposed, std::span<const TensorDesc> in,
                          const Attrs& attrs);

struct PoolGeometry {
  Planes in;
  int64_t oh = 1, ow = 1, kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  bool includePad = true;
  int64_t divisor = 0;
  Shape out;
};
PoolGeometry poolGeometry(const OpSpec& op, PoolKind kind, int spatial, const TensorDesc& in, const Attrs& attrs);

struct Resize {
  int mode = 0;  // interpolate.comp's MODE
  int64_t oh = 0, ow = 0;
  float scaleH = 0, scaleW = 0;
  bool alignCorners = false;
  Shape out;
};
Resize resizeGeometry(const OpSpec& op, const TensorDesc& in, const Attrs& attrs);

}  // namespace tensord::compute
