#pragma once
// Reduction templates.

#include "compute/kernel_templates.h"

namespace tensord::compute {

// Reduction over attribute `dim` (ints; [] = all) with `keepdim`; mean scales by 1/count.
enum class ReduceKind { kSum, kMean };
std::shared_ptr<const KernelTemplate> reduce(ReduceKind kind);

}  // namespace tensord::compute
