#pragma once
// The scan template: cumsum and cumprod along attribute `dim` (int,
// required). Float inputs accumulate in f32; integer and bool inputs in i64
// and produce i64, like PyTorch.

#include "compute/kernel_templates.h"

namespace tensord::compute {

enum class ScanKind { kCumsum, kCumprod };
std::shared_ptr<const KernelTemplate> scan(ScanKind kind);

}  // namespace tensord::compute
