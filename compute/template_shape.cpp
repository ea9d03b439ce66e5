// The shape templates (see template_shape.h) and the GLSL the remap template
// generates from kernels/remap.comp.

#include "compute/template_shape.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "compute/error.h"
#include "compute/glsl.h"
#include "compute/op_spec.h"
#include "compute/template_util.h"

namespace tensord::compute {
namespace {

class View final : public KernelTemplate {
 public:
  explicit View(ViewInfer infer) : infer_(std::move(infer)) {}
  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const override {
    return {TensorDesc{in[0].dtype, infer_(op, in[0], attrs)}};
  }
  void record(const OpSpec&, Recorder&, std::span<const TensorView>, std::span<const TensorView>,
              const Attrs&) const override {}
  std::vector<const KernelSource*> variants(const OpSpec&, DType) const override { return {}; }

 private:
  ViewInfer infer_;
};

struct RemapPush {
  uint64_t y, x, meta;
  uint32_t n, rank, base, tri;
  int32_t diag;
};


class Remap final : public KernelTemplate {
 public:
  explicit Remap(RemapPlanner planner) : planner_(std::move(planner)) {}

  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const override {
    return planner_(op, in, attrs).outputs;
  }

  const KernelSource& source(DType dtype) const {
    std::string key = "remap|" + std::string(dtypeName(dtype));
    return variants_.get(key, [&] {
      GlslBuilder b(dtype);
      b.output("y", dtype);
      b.input("x", dtype);
      return b.build(kernelFile("remap.comp"));
    });
  }

  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs& attrs) const override {
    std::vector<TensorDesc> descs;
    for (const auto& v : in) descs.push_back(v.desc);
    RemapPlan plan = planner_(op, descs, attrs);
    for (const RemapCopy& c : plan.copies) {
      int64_t n = 1;
      for (const auto& d : c.dims) n *= d.size;
      if (n == 0) continue;
      std::vector<uint32_t> meta;
      appendScalarWords(meta, c.fill);
      for (const auto& d : c.dims) {
        for (int64_t w : {d.size, d.outStride, d.inStride, d.offset, d.step, d.inSize, int64_t(d.mode)}) {
          meta.push_back(uint32_t(int32_t(w)));
        }
      }
      const TensorView& src = in[c.input];
      const TensorView& dst = out[c.output];
      RemapPush push{};
      push.y = dst.buffer->deviceAddress();
      push.x = src.buffer->deviceAddress();
      push.meta = r.params(meta);
      push.n = uint32_t(n);
      push.rank = uint32_t(c.dims.size());
      push.base = uint32_t(c.outBase);
      push.tri = uint32_t(c.triangle);
      push.diag = int32_t(std::max<int64_t>(-2147483647, std::min<int64_t>(2147483647, c.diagonal)));
      r.dispatch(source(dst.desc.dtype), push, r.groupsFor(uint64_t(n), 256));
    }
  }

  std::vector<const KernelSource*> variants(const OpSpec&, DType dtype) const override { return {&source(dtype)}; }

 private:
  RemapPlanner planner_;
  KernelVariants variants_;
};

}  // namespace

std::shared_ptr<const KernelTemplate> view(ViewInfer infer) { return std::make_shared<View>(std::move(infer)); }

std::shared_ptr<const KernelTemplate> remap(RemapPlanner planner) {
  return std::make_shared<Remap>(std::move(planner));
}

RemapCopy identityCopy(const Shape& shape, const Shape& outShape, int64_t base, size_t input, size_t output) {
  RemapCopy c{.input = input, .output = output, .outBase = base, .dims = {}};
  auto inStrides = contiguousStrides(shape), outStrides = contiguousStrides(outShape);
  for (size_t d = 0; d < shape.size(); ++d) {
    c.dims.push_back({.size = shape[d], .outStride = outStrides[d], .inStride = inStrides[d], .inSize = shape[d]});
  }
  return c;
}

}  // namespace tensord::compute
