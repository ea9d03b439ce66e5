#pragma once
// Kernel templates: the strategies behind the op table. A template knows how
// to infer its outputs from its inputs and attributes, and how to record the
// dispatches that compute them. One template serves a family of ops: the
// elementwise template with "a + b" is add, with "exp(a)" is exp. Each
// family's templates are declared in template_<family>.h.

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
  // Inputs already passed the arity and dtype checks of the spec. Throws
  // ComputeError naming the op and argument on bad shapes or attributes.
  virtual std::vector<TensorDesc> infer(const OpSpec& spec, std::span<const TensorDesc> inputs,
                                        const Attrs& attrs) const = 0;
  virtual void record(const OpSpec& spec, Recorder& recorder, std::span<const TensorView> inputs,
                      std::span<const TensorView> outputs, const Attrs& attrs) const = 0;
  // Every kernel this template generates for `spec` when its data inputs
  // have `dtype`, so the build can compile each one once (kernel_check.cpp).
  virtual std::vector<const KernelSource*> variants(const OpSpec& spec, DType dtype) const = 0;

  // Arithmetic the op does, for ops whose device time is not set by the
  // bytes they move (matmul, conv): the device scheduler's cost estimate
  // (FairQueue). 0 = memory-bound.
  virtual uint64_t flops(const OpSpec& spec, std::span<const TensorView> inputs, std::span<const TensorView> outputs,
                         const Attrs& attrs) const {
    return 0;
  }

  // Ops whose output shapes depend on input values (masked_select, nonzero)
  // say so here. The engine then first records recordShapeQuery, which
  // writes up to 8 uint32 words at `words` on the device, and once that ran
  // asks outputsFromDevice for the outputs; infer() is not used for them.
  virtual bool shapeFromDevice() const { return false; }
  virtual void recordShapeQuery(const OpSpec& spec, Recorder& recorder, std::span<const TensorView> inputs,
                                const Attrs& attrs, uint64_t words) const {}
  virtual std::vector<TensorDesc> outputsFromDevice(const OpSpec& spec, std::span<const TensorDesc> inputs,
                                                    const Attrs& attrs, const uint32_t* words) const {
    return {};
  }
};

// The shader copy used for device-to-device copies.
const KernelSource& copyKernel();
struct CopyPush {
  uint64_t src, dst;
  uint32_t count16;  // 16-byte words
};

}  // namespace tensord::compute
