#pragma once
// Internal to the nn templates (template_nn.cpp, template_nn_backward.cpp):
// what the row kernels built on kernels/norm_rows.glsl share, so a forward
// kernel and its backward agree on workgroup size and on how rows are laid
// out and split between invocations.

#include <cstdint>
#include <string>

#include "compute/dtype.h"
#include "compute/glsl.h"

namespace tensord::compute::nn_rows {

constexpr uint32_t kWG = 128;  // invocations per workgroup of the row kernels

std::string body(const char* file);                  // norm_rows.glsl followed by `file`
GlslBuilder builder(DType dtype, bool perThread);    // defines WG (and PER_THREAD)

// A tensor viewed as [outer, d, inner] around one dim (softmax and its
// backward): rows = outer * inner, and whether one invocation takes a row.
struct Layout {
  int64_t rows, d, inner;
  bool perThread;
};
Layout around(const Shape& shape, size_t dim);

}  // namespace tensord::compute::nn_rows
