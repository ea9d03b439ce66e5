#pragma once
// The elementwise template: every unary, binary and ternary elementwise op.
//
// An op has up to four operands, a, b, c, d. Operand k is the op's k-th
// input; where that input is optional and left off, it is the scalar
// attribute of the same name (`add x --attr other=2.5`), else `absent[k]`.
// Tensor operands broadcast (NumPy rules) and promote (PyTorch rules, scalars
// as Python scalars). `params` names further scalar attributes, visible to
// the expression as s0, s1, ... Everything is computed in the compute type T
// (float for f32/f16/bf16) and converted on load and store.

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compute/kernel_templates.h"

namespace tensord::compute {

struct ElementwiseSpec {
  enum class Result {
    kSame,     // compute and output in the promoted dtype
    kFloat,    // like kSame, but integral and bool inputs compute in f32 (exp, sqrt, true division)
    kBool,     // compute in the promoted dtype, output bool (comparisons, isnan)
    kLogical,  // operands converted to bool, output bool (logical_and ...)
  };
  int arity = 1;
  std::vector<std::string> params;
  std::vector<double> absent;  // per operand; NaN or missing: the operand is required
  Result result = Result::kSame;
  std::function<Result(const Attrs&)> resultFor;  // when set, picks `result` per call
  std::string dtypeAttr;  // when set: output and compute dtype come from this text attribute (`to`)
  // The GLSL expression over a..d (type T) and s0.. for this call. `compute`
  // is the compute dtype; attrs may pick the expression (div's rounding_mode).
  std::function<std::string(const Attrs& attrs, DType compute)> expr;
};

std::shared_ptr<const KernelTemplate> elementwise(ElementwiseSpec spec);

// Shorthand: one expression for every dtype.
std::shared_ptr<const KernelTemplate> elementwise(int arity, std::string expr,
                                                  ElementwiseSpec::Result result = ElementwiseSpec::Result::kSame,
                                                  std::vector<std::string> params = {});

// One elementwise call as a piece of a fused kernel (template_fused.h): its
// expression for this call, where each operand a..d comes from (a tensor
// input or a scalar), and the scalars s0.. . Only calls that compute and
// produce floating values fuse; nullopt for every other call, and for ops
// not of this template.
struct ElementwisePiece {
  struct Operand {
    bool tensor = false;
    size_t input = 0;  // when tensor
    double value = 0;  // when a scalar
  };
  std::string expr;
  std::vector<Operand> operands;  // a, b, c, d: the op's arity
  std::vector<double> params;     // s0, s1, ...
  DType compute = DType::F32;
  DType out = DType::F32;
};
std::optional<ElementwisePiece> elementwisePiece(const OpSpec& op, std::span<const TensorDesc> inputs,
                                                 const Attrs& attrs);

}  // namespace tensord::compute
