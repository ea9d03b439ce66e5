#pragma once
// Elementwise fusion: several elementwise calls whose results share one
// shape run as one kernel that keeps the intermediate values in registers
// and writes only the results needed elsewhere. A captured graph's chain of
// 100 adds becomes one dispatch that reads its inputs once and writes once.
//
// Only calls that compute and produce floats fuse (elementwisePiece). Each
// intermediate value is rounded to its call's output dtype (f16, bf16) as if
// it had been stored, so a fused chain computes what the calls one by one
// would, up to the compiler contracting a multiply and an add across two
// calls into one fused multiply-add.

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "compute/attrs.h"
#include "compute/dtype.h"

namespace tensord::compute {

struct OpSpec;

constexpr size_t kMaxFusedInputs = 8;
constexpr size_t kMaxFusedOutputs = 4;

// One call of a fused kernel.
struct FusedCall {
  const OpSpec* spec = nullptr;
  const Attrs* attrs = nullptr;  // must outlive the fused op
  // Per tensor input of the call: k >= 0 is the fused op's input k, and
  // -1 - j the result of calls[j] (an earlier call of the same kernel).
  std::vector<int> inputs;
  std::vector<TensorDesc> inputDescs;  // the call's tensor inputs as captured
};

// Whether a call can be a piece of a fused kernel.
bool fusable(const OpSpec& spec, std::span<const TensorDesc> inputs, const Attrs& attrs);

// An op that computes `calls` in one kernel. Every call's result must have
// `shape`; the op's inputs (at most kMaxFusedInputs, each broadcastable to
// `shape`) are `inputs`, and its outputs the results of the calls listed in
// `outputs` (at most kMaxFusedOutputs), in that order. The op is not in the
// op table; its name lists the calls. Throws std::logic_error when the
// calls break these rules.
std::shared_ptr<const OpSpec> fuseElementwise(std::vector<FusedCall> calls, std::vector<TensorDesc> inputs,
                                              std::vector<size_t> outputs, const Shape& shape);

}  // namespace tensord::compute
