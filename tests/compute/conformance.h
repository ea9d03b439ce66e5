#pragma once
// The op conformance suite's shared parts: typed host tensors, references in
// double, per-dtype tolerances (stated once, here), and the coverage registry
// that makes an op without a test case fail the suite.
//
// Tolerances: a result r matches the reference w when
//   |r - w| <= atol(dtype) * scale + rtol(dtype) * |w|
// where scale is 1 for elementwise ops and the number of terms for sums and
// dot products (the caller passes it). f32: rtol 1e-5, atol 1e-6; f16:
// rtol 2e-3, atol 1e-3; bf16: rtol 1.6e-2, atol 1e-2; integers and bool exact.
// References compute in double from the same (already rounded) inputs, then
// round to the output dtype.

#include <cstdint>
#include <string>
#include <vector>

#include "tests/compute/engine_fixture.h"

namespace tensord::compute::testing {

// Registers op names as having conformance cases; use at namespace scope:
//   TENSORD_COVERS(add, "add", "sub");
bool coverOps(std::initializer_list<const char*> names);
#define TENSORD_COVERS(tag, ...) [[maybe_unused]] static const bool kCovers_##tag = coverOps({__VA_ARGS__})
const std::vector<std::string>& coveredOps();

// Host-side values of any dtype, held as doubles (exact for every dtype
// tensord has, i64 up to 2^53).
struct HostTensor {
  DType dtype = DType::F32;
  Shape shape;
  std::vector<double> values;
  int64_t numel() const { return int64_t(values.size()); }
};

// Rounds `x` to what `dtype` can hold (f16/bf16 round to nearest even; ints
// truncate towards zero and wrap like a C cast; bool is x != 0).
double roundTo(DType dtype, double x);
// Random values for `dtype` in [lo, hi], already representable in it.
HostTensor randomTensor(DType dtype, const Shape& shape, double lo = -1, double hi = 1);
HostTensor makeTensor(DType dtype, const Shape& shape, std::vector<double> values);  // values rounded to dtype

struct Tolerance {
  double atol, rtol;
};
Tolerance tolerance(DType dtype);

// Compares `got` (a device result) with `want` in want's dtype tolerances
// (`scale` multiplies atol, see above); NaN matches NaN and infinities must
// match exactly. Reports up to 5 mismatches with `what`.
void expectClose(const HostTensor& got, const HostTensor& want, const std::string& what, double scale = 1,
                 Tolerance tol = {-1, -1});

class ConformanceTest : public EngineTest {
 protected:
  static TensorView put(const HostTensor& t);
  static HostTensor get(const TensorView& t);
  // Runs `op` on host tensors and downloads every output.
  static std::vector<HostTensor> call(const std::string& op, const std::vector<HostTensor>& inputs,
                                      const std::vector<std::pair<std::string, AttrValue>>& attrs = {});
  // The message of the ComputeError `op` throws (at validation or on the device), or "no error".
  static std::string errorOf(const std::string& op, const std::vector<HostTensor>& inputs,
                             const std::vector<std::pair<std::string, AttrValue>>& attrs = {});
};

// Linear index helpers for references.
std::vector<int64_t> unravel(int64_t index, const Shape& shape);
int64_t ravel(const std::vector<int64_t>& idx, const Shape& shape);  // idx may be longer (leading ignored) for broadcasting
// Index into `shape` (broadcast to `out`) of the element at out-linear index i.
int64_t broadcastIndex(const Shape& shape, const Shape& out, int64_t i);
std::string dimsName(const Shape& s);  // "3x1x5", "scalar"
// Kernel variant names (Engine::kernelDispatches): whether any contains
// `part`, and all of them as "[a, b]" for a failure message.
bool anyContains(const std::vector<std::string>& names, const std::string& part);
std::string namesStr(const std::vector<std::string>& names);

}  // namespace tensord::compute::testing
