#pragma once
// Matrix product templates. One kernel (kernels/matmul.comp) computes
// y = alpha * (a @ b) + beta * bias over a batch of matrices with arbitrary
// element strides; the op kinds below differ only in how they map their
// inputs onto it. dot is a split two-pass reduction (kernels/matmul_dot.comp).

#include <memory>

#include "compute/kernel_templates.h"

namespace tensord::compute {

enum class MatmulKind {
  kMatmul,   // PyTorch's matmul: 1-D promotion, broadcast batch dims
  kMm,       // 2-D x 2-D
  kBmm,      // 3-D x 3-D, equal batch
  kAddmm,    // beta * input + alpha * (mat1 @ mat2), input broadcast to [M, N]
  kBaddbmm,  // beta * input + alpha * (batch1 @ batch2), input broadcast to [B, M, N]
  kLinear,   // input [..., in] @ weight[out, in]^T + bias
  kOuter,    // 1-D x 1-D -> 2-D
};

std::shared_ptr<const KernelTemplate> matmul(MatmulKind kind = MatmulKind::kMatmul);

// 1-D x 1-D -> 0-d.
std::shared_ptr<const KernelTemplate> dot();

}  // namespace tensord::compute
