#pragma once
// The sort template: sort (values, indices), argsort (indices) and topk
// (values, indices of the k largest or smallest) along attribute `dim`.
// Always stable (equal keys keep their order; NaN sorts as the greatest
// value, as in PyTorch). Rows that fit a workgroup sort in shared memory;
// longer rows run a multi-dispatch global bitonic sort over scratch memory.

#include "compute/kernel_templates.h"

namespace tensord::compute {

enum class SortKind { kSort, kArgsort, kTopk };
std::shared_ptr<const KernelTemplate> sortTemplate(SortKind kind);

}  // namespace tensord::compute
