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

// For other templates: y[i] = a[i] @ b[i] for i < batch, a [batch, m, k] and
// b [batch, k, n] contiguous in `dtype` (f16 or bf16; or f32, split into
// bf16 parts on devices with DeviceFeatures::f32SplitBf16), y [batch, m, n]
// in f32, on the tensor-core kernel (kernels/matmul_coop.comp with Y_F32).
// tensorCoreProductF32 says whether the device and the sizes allow it (the
// addresses must also be 16-byte aligned); recordTensorCoreProductF32
// throws std::logic_error where they do not.
bool tensorCoreProductF32(const DeviceFeatures* features, DType dtype, int64_t batch, int64_t m, int64_t n, int64_t k);
void recordTensorCoreProductF32(Recorder& r, DType dtype, uint64_t a, uint64_t b, uint64_t y, int64_t batch, int64_t m,
                                int64_t n, int64_t k);

}  // namespace tensord::compute
