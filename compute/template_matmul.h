#pragma once
// Matrix product templates.

#include "compute/kernel_templates.h"

namespace tensord::compute {

// Matrix product with PyTorch's matmul rules (1-D promotion, broadcast batch dims).
std::shared_ptr<const KernelTemplate> matmul();

}  // namespace tensord::compute
