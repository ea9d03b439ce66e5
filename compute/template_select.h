#pragma once
// Ops whose output size depends on the input values: masked_select.

#include "compute/kernel_templates.h"

namespace tensord::compute {

// out = input[mask] (1-D, row-major order over the broadcast shape).
std::shared_ptr<const KernelTemplate> maskedSelect();

}  // namespace tensord::compute
