#pragma once
// Kernel templates: the strategies behind the op table. A template knows how
// to infer its outputs from its inputs and attributes, and how to record the
// dispatches that compute them. One template serves many ops: `binary("a + b")`
// is add, `unary("exp(x)")` is exp.

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "compute/attrs.h"
#include "compute/dtype.h"
#include "compute/engine.h"
#include "compute/recorder.h"

namespace tensord::compute {

struct OpSpec;

class KernelTemplate {
 public:
  virtual ~KernelTemplate() = default;
  // Inputs already passed the arity and dtype checks. Throws ComputeError
  // naming the op and argument on bad shapes or attributes.
  virtual std::vector<TensorDesc> infer(const OpSpec& spec, std::span<const TensorDesc> inputs,
                                        const Attrs& attrs) const = 0;
  virtual void record(Recorder& recorder, std::span<const TensorView> inputs, std::span<const TensorView> outputs,
                      const Attrs& attrs) const = 0;
};

// Elementwise y = EXPR(x), EXPR a GLSL expression over float `x`.
std::shared_ptr<const KernelTemplate> unary(std::string expr);
// Elementwise c = EXPR(a, b) with NumPy broadcasting.
std::shared_ptr<const KernelTemplate> binary(std::string expr);
// Reduction over attribute `dim` (ints; [] = all) with `keepdim`; mean scales by 1/count.
enum class ReduceKind { kSum, kMean };
std::shared_ptr<const KernelTemplate> reduce(ReduceKind kind);
// Matrix product with PyTorch's matmul rules (1-D promotion, broadcast batch dims).
std::shared_ptr<const KernelTemplate> matmul();

// The shader copy used for device-to-device copies.
const KernelSource& copyKernel();
struct CopyPush {
  uint64_t src, dst;
  uint32_t count16;  // 16-byte words
};

// NumPy broadcasting of two shapes; nullopt if incompatible.
std::optional<Shape> broadcastShapes(const Shape& a, const Shape& b);

}  // namespace tensord::compute
