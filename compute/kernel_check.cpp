// Build step: compiles every kernel variant of every op in every dtype it
// declares with glslang, so a broken shader fails the build instead of a
// user's call. Needs no Vulkan device. Exit status 1 lists what failed.
// Every op that fuses (template_fused.h) is also compiled as a call of one
// fused kernel per float dtype, so its expression is known to work there.

#include <algorithm>
#include <cstdio>
#include <deque>
#include <exception>
#include <set>

#include "compute/kernel_cache.h"
#include "compute/kernel_templates.h"
#include "compute/op_table.h"
#include "compute/template_fused.h"

int main() {
  using namespace tensord::compute;
  OpTable table;
  std::set<const KernelSource*> seen;
  int failures = 0;
  for (const OpSpec& op : table.all()) {
    for (DType dtype : op.dtypes) {
      std::vector<const KernelSource*> sources;
      try {
        sources = op.kernel->variants(op, dtype);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s (%s): generating kernels failed: %s\n", op.name.c_str(),
                     std::string(dtypeName(dtype)).c_str(), e.what());
        ++failures;
        continue;
      }
      for (const KernelSource* source : sources) {
        if (!seen.insert(source).second) continue;
        try {
          compileGlsl(source->name, source->glsl);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "%s (%s): %s\n", op.name.c_str(), std::string(dtypeName(dtype)).c_str(), e.what());
          ++failures;
        }
      }
    }
  }
  // One fused kernel per float dtype: every fusable op in turn on the result
  // of the one before (its other tensor inputs the kernel's input).
  size_t fusedCalls = 0;
  std::deque<Attrs> attrs;  // the calls point into it
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    std::vector<FusedCall> calls;
    const Shape shape{4};
    for (const OpSpec& op : table.all()) {
      if (std::find(op.dtypes.begin(), op.dtypes.end(), dtype) == op.dtypes.end()) continue;
      try {
        attrs.push_back(validateAttrs(op, {}));
      } catch (const std::exception&) {
        continue;  // needs attributes the check cannot guess
      }
      if (op.variadic() || op.inputs.empty()) continue;
      std::vector<TensorDesc> descs;  // optional operands too
      for (const InputSpec& in : op.inputs) {
        descs.push_back(TensorDesc{in.role == InputRole::kMask ? DType::Bool : dtype, shape});
      }
      try {
        if (!fusable(op, descs, attrs.back())) continue;
      } catch (const std::exception&) {
        continue;  // not elementwise in this form
      }
      FusedCall call{.spec = &op, .attrs = &attrs.back(), .inputDescs = descs};
      for (size_t k = 0; k < descs.size(); ++k) call.inputs.push_back(k == 0 && !calls.empty() ? -int(calls.size()) : 0);
      calls.push_back(std::move(call));
    }
    fusedCalls += calls.size();
    try {
      size_t last = calls.size() - 1;
      auto fused = fuseElementwise(std::move(calls), {TensorDesc{dtype, shape}}, {last}, shape);
      for (const KernelSource* source : fused->kernel->variants(*fused, dtype)) compileGlsl(source->name, source->glsl);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fused kernel (%s): %s\n", std::string(dtypeName(dtype)).c_str(), e.what());
      ++failures;
    }
  }
  std::printf("kernel check: %zu ops, %zu kernel variants compiled, %zu calls fused in 3, %d failed\n",
              table.all().size(), seen.size(), fusedCalls, failures);
  return failures ? 1 : 0;
}
