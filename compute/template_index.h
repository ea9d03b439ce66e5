#pragma once
// The index templates.
//
// indexGather(): out[o] = input[... index[pos(o)] ...] — gather, index_select
//   and take (kernels/index_gather.comp).
// indexScatter(): out = input with src values put (or added) at the places an
//   index names — scatter, scatter_add, index_put (kernels/index_scatter.comp).
//   Deterministic and atomic-free: each output element loops over the index
//   positions that may target it, so every dtype accumulates and duplicate
//   indices sum (scatter_add, accumulate) or the last one wins (scatter).
// maskedFill(): out = mask ? value : input (kernels/index_masked.comp).
//
// Indices are i32 or i64; negative ones count from the end. An index out of
// range is found on the device: the access is clamped (or skipped) and the
// op fails with "<op>: index 7 is out of range for dim 0 of size 5".

#include <memory>

#include "compute/kernel_templates.h"

namespace tensord::compute {

enum class GatherKind { kGather, kIndexSelect, kTake };
std::shared_ptr<const KernelTemplate> indexGather(GatherKind kind);

enum class ScatterKind { kScatter, kScatterAdd, kIndexPut };
std::shared_ptr<const KernelTemplate> indexScatter(ScatterKind kind);

std::shared_ptr<const KernelTemplate> maskedFill();

}  // namespace tensord::compute
