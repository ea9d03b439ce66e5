#pragma once
// The reduction template: every reduction over a set of dims (sum, mean,
// prod, max, min, amax, amin, argmax, argmin, var, std, var_mean, norm,
// logsumexp, all, any, count_nonzero). One kernel file (kernels/reduce.comp)
// with the op's accumulate / combine / finalize selected per op; any set of
// dims (adjacent or not); few outputs are split over many workgroups and
// finished by a second pass.

#include "compute/kernel_templates.h"

namespace tensord::compute {

enum class ReduceKind {
  kSum, kMean, kProd,
  kMax, kMin,          // max/min: values (and indices when attribute `dim` is given)
  kAmax, kAmin,
  kArgmax, kArgmin,
  kVar, kStd, kVarMean,
  kNorm, kLogsumexp,
  kAll, kAny, kCountNonzero,
};

// Ops whose `dim` is a list (kInts, [] = all) or, for max/min/argmax/argmin,
// one optional int (absent = all dims, flattened).
std::shared_ptr<const KernelTemplate> reduce(ReduceKind kind);

}  // namespace tensord::compute
