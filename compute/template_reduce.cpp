// Reductions (sum, mean) over adjacent dims. f32 only for now.

#include "compute/template_reduce.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "compute/error.h"
#include "compute/op_spec.h"
#include "compute/template_util.h"

namespace tensord::compute {
namespace {

// Shared GLSL prelude: every operand is a buffer device address.
constexpr const char* kPrelude = R"(#version 460
#extension GL_EXT_buffer_reference : require
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Floats { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer Words { uvec4 v[]; };
)";

constexpr uint32_t kGroupSize = 256;

std::string withPrelude(const std::string& body) { return kPrelude + body; }

// Workgroups for `items` on `axis`, capped at the device's limit there; the
// kernels loop (grid stride) over whatever the cap leaves.
uint32_t groupsFor(uint64_t items, uint32_t perGroup, const Recorder& r, int axis = 0) {
  uint64_t groups = (items + perGroup - 1) / perGroup;
  return uint32_t(std::min<uint64_t>(groups, r.maxGroups(axis)));
}

// ---------------------------------------------------------------- reduce

struct ReducePush {
  uint64_t x, y;
  uint32_t outer, d, inner;
  float scale;
};

// The input viewed as [outer, d, inner], reduced over d.
struct ReduceView {
  int64_t outer = 1, d = 1, inner = 1;
};

ReduceView reduceView(const std::string& op, const Shape& shape, const std::vector<int64_t>& dims,
                      std::vector<bool>* reduced) {
  reduced->assign(shape.size(), dims.empty());
  for (int64_t dim : dims) {
    int64_t d = normalizeDim(op, dim, shape.size());
    if (shape.empty()) continue;  // a scalar reduces over nothing
    if ((*reduced)[size_t(d)]) throwInvalid(op + ": attribute 'dim' names dim " + std::to_string(dim) + " twice");
    (*reduced)[size_t(d)] = true;
  }
  // The reduced dims must be adjacent, so the view stays [outer, d, inner].
  auto first = std::find(reduced->begin(), reduced->end(), true);
  auto last = std::find(reduced->rbegin(), reduced->rend(), true).base();
  if (first != reduced->end() && std::find(first, last, false) != last) {
    throwInvalid(op + ": attribute 'dim' must name adjacent dims; got a gap between them");
  }
  ReduceView v;
  for (size_t i = 0; i < shape.size(); ++i) {
    if ((*reduced)[i]) v.d *= shape[i];
    else if (first == reduced->end() || int64_t(i) < first - reduced->begin()) v.outer *= shape[i];
    else v.inner *= shape[i];
  }
  return v;
}

class Reduce final : public KernelTemplate {
 public:
  explicit Reduce(ReduceKind kind)
      : kind_(kind),
        rows_{"reduce:rows", withPrelude(R"(
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { Floats x; Floats y; uint outer; uint d; uint inner; float scale; } p;
shared float partial[256];
void main() {
  uint lid = gl_LocalInvocationID.x;
  for (uint row = gl_WorkGroupID.x; row < p.outer; row += gl_NumWorkGroups.x) {
    float acc = 0.0;
    uint base = row * p.d;
    for (uint k = lid; k < p.d; k += 256u) acc += p.x.v[base + k];
    partial[lid] = acc;
    barrier();
    for (uint s = 128u; s > 0u; s >>= 1u) {
      if (lid < s) partial[lid] += partial[lid + s];
      barrier();
    }
    if (lid == 0u) p.y.v[row] = partial[0] * p.scale;
    barrier();
  }
}
)")},
        cols_{"reduce:cols", withPrelude(R"(
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { Floats x; Floats y; uint outer; uint d; uint inner; float scale; } p;
void main() {
  uint total = p.outer * p.inner;
  uint stride = gl_NumWorkGroups.x * 256u;
  for (uint idx = gl_GlobalInvocationID.x; idx < total; idx += stride) {
    uint o = idx / p.inner, i = idx % p.inner;
    uint base = o * p.d * p.inner + i;
    float acc = 0.0;
    for (uint k = 0u; k < p.d; ++k) acc += p.x.v[base + k * p.inner];
    p.y.v[idx] = acc * p.scale;
  }
}
)")} {}

  std::vector<TensorDesc> infer(const OpSpec& spec, std::span<const TensorDesc> in,
                                const Attrs& attrs) const override {
    std::vector<bool> reduced;
    reduceView(spec.name, in[0].shape, attrs.getInts("dim"), &reduced);
    bool keepdim = attrs.getBool("keepdim");
    Shape shape;
    for (size_t i = 0; i < in[0].shape.size(); ++i) {
      if (!reduced[i]) shape.push_back(in[0].shape[i]);
      else if (keepdim) shape.push_back(1);
    }
    return {TensorDesc{in[0].dtype, shape}};
  }

  std::vector<const KernelSource*> variants(const OpSpec&, DType) const override { return {&rows_, &cols_}; }

  void record(const OpSpec&, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs& attrs) const override {
    std::vector<bool> reduced;
    ReduceView v = reduceView("reduce", in[0].desc.shape, attrs.getInts("dim"), &reduced);
    float scale = kind_ == ReduceKind::kMean ? (v.d ? 1.0f / float(v.d) : NAN) : 1.0f;
    ReducePush push{in[0].buffer->deviceAddress(), out[0].buffer->deviceAddress(), uint32_t(v.outer),
                    uint32_t(v.d), uint32_t(v.inner), scale};
    if (v.inner == 1) {
      r.dispatch(rows_, push, r.groupsFor(uint64_t(v.outer), 1));
    } else {
      r.dispatch(cols_, push, r.groupsFor(uint64_t(v.outer * v.inner), kGroupSize));
    }
  }

 private:
  ReduceKind kind_;
  KernelSource rows_, cols_;
};

}  // namespace

std::shared_ptr<const KernelTemplate> reduce(ReduceKind kind) { return std::make_shared<Reduce>(kind); }

}  // namespace tensord::compute
