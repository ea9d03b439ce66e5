#pragma once
// The shape templates.
//
// view(): ops whose output is a contiguous reinterpretation of input 0
// (reshape, flatten, squeeze, unsqueeze). Only the shape is computed; the
// daemon hands out input 0's buffer as the output and nothing runs.
//
// remap(): ops whose every output element is one input element (or a
// constant): out[base + sum(c_d * outStride_d)] = in[sum(map_d(c_d) * inStride_d)]
// over an iteration shape, where map_d(c) = offset_d + step_d * c followed by
// the dim's mode (linear, wrap, reflect, replicate, or constant fill when out
// of range). One generic kernel (kernels/remap.comp) per dtype serves
// permute, expand, slice, flip, roll, pad, repeat, cat, split, triu ...; an
// op supplies a planner that turns its inputs and attributes into output
// descriptors and a list of such copies.

#include <functional>
#include <memory>
#include <vector>

#include "compute/kernel_templates.h"

namespace tensord::compute {

using ViewInfer = std::function<Shape(const OpSpec& op, const TensorDesc& input, const Attrs& attrs)>;
std::shared_ptr<const KernelTemplate> view(ViewInfer infer);

struct RemapDim {
  enum Mode : int32_t { kLinear = 0, kWrap = 1, kReflect = 2, kReplicate = 3, kConstant = 4 };
  int64_t size = 1;       // iteration extent
  int64_t outStride = 0;  // output element stride
  int64_t inStride = 0;   // input element stride (0: broadcast)
  int64_t offset = 0;     // input coordinate = offset + step * c, then `mode`
  int64_t step = 1;
  int64_t inSize = 1;     // input extent, for wrap/reflect/replicate/constant
  Mode mode = kLinear;
};

struct RemapCopy {
  size_t input = 0, output = 0;
  int64_t outBase = 0;
  std::vector<RemapDim> dims;  // outermost first
  double fill = 0;             // the constant for kConstant dims and masked triangles
  int triangle = 0;            // 0: none, 1: keep col - row >= diagonal (triu), 2: keep col - row <= diagonal (tril)
  int64_t diagonal = 0;        // over the last two iteration dims
};

struct RemapPlan {
  std::vector<TensorDesc> outputs;
  std::vector<RemapCopy> copies;
};

using RemapPlanner = std::function<RemapPlan(const OpSpec& op, std::span<const TensorDesc> inputs, const Attrs& attrs)>;
std::shared_ptr<const KernelTemplate> remap(RemapPlanner planner);

// A copy of all of `in` (shape `iter` = in's shape) into output `out` of
// shape `outShape` at element offset `base`: the identity copy cat and
// contiguous build on.
RemapCopy identityCopy(const Shape& shape, const Shape& outShape, int64_t base = 0, size_t input = 0,
                       size_t output = 0);

}  // namespace tensord::compute
