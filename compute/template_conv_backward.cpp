// The conv family's backward templates (see template_conv_backward.h) and the
// GLSL they generate from kernels/conv_backward.comp, pool_backward.comp and
// interpolate_backward.comp.

#include "compute/template_conv_backward.h"

#include <algorithm>
#include <cstring>

#include "compute/error.h"
#include "compute/glsl.h"
#include "compute/op_spec.h"

namespace tensord::compute {
namespace {

std::vector<uint32_t> words(std::initializer_list<int64_t> v) {
  std::vector<uint32_t> w;
  for (int64_t x : v) w.push_back(uint32_t(int32_t(x)));
  return w;
}

uint32_t floatBits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// The grad of a (grad, input, ...) backward call must have the forward
// output's shape.
void expectGrad(const OpSpec& op, const TensorDesc& grad, const Shape& out) {
  if (grad.shape != out) {
    throwInvalid(op.name + ": input 'grad' has shape " + shapeStr(grad.shape) + "; expected " + shapeStr(out));
  }
}

// ---------------------------------------------------------------- conv weight

// The weight gradient as conv_backward.comp computes it: a correlation of A
// and B (see there), its sum over A's positions split into chunks.
struct Correlation {
  int64_t n = 1, ca = 1, ah = 1, aw = 1, cb = 1, bh = 1, bw = 1, ag = 1, bg = 1;
  int64_t per = 1, chunks = 1;  // positions (n, ah, aw) of A per chunk; chunks
  int64_t blocks = 1;           // blocks of channels a per group (BPG)
  ConvGeometry conv;
  Shape weight;
};

// The sum over A's positions is split into as many chunks as it takes to
// give the device about kTargetInvocations invocations (a large GPU full),
// each chunk at least kMinPositions positions long (so an invocation's
// setup stays small next to its products), and the partial sums at most
// kMaxPartials floats (16 MiB).
constexpr int64_t kTargetInvocations = int64_t(1) << 18;
constexpr int64_t kMinPositions = 256;
constexpr int64_t kMaxPartials = int64_t(1) << 22;
constexpr int64_t kChannelsPerInvocation = 4;  // CAB in conv_backward.comp

struct CorrelationPush {
  uint64_t part, a, b, meta;
  uint32_t items;
};

class ConvWeightGrad final : public KernelTemplate {
 public:
  ConvWeightGrad(int spatial, bool transposed) : spatial_(spatial), transposed_(transposed) {}

  // in: grad, input, weight.
  Correlation correlation(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const {
    Correlation c;
    c.conv = convGeometry(op, spatial_, transposed_, in.subspan(1, 2), attrs);
    const ConvGeometry& g = c.conv;
    expectGrad(op, in[0], g.out);
    c.weight = in[2].shape;
    c.n = g.in.n;
    if (!transposed_) {  // A = grad [N, O, OH, OW], B = input [N, C, H, W]
      c.ca = g.o, c.ah = g.oh, c.aw = g.ow;
      c.cb = g.in.c, c.bh = g.in.h, c.bw = g.in.w;
    } else {  // A = input, B = grad
      c.ca = g.in.c, c.ah = g.in.h, c.aw = g.in.w;
      c.cb = g.o, c.bh = g.oh, c.bw = g.ow;
    }
    c.ag = c.ca / g.groups;
    c.bg = c.weight[1];
    c.blocks = (c.ag + kChannelsPerInvocation - 1) / kChannelsPerInvocation;
    const int64_t positions = c.n * c.ah * c.aw, weights = std::max<int64_t>(in[2].numel(), 1);
    const int64_t perChunk = std::max<int64_t>(g.groups * c.blocks * c.bg * g.kh * g.kw, 1);  // invocations each
    const int64_t chunks =
        std::max<int64_t>(std::min({(kTargetInvocations + perChunk - 1) / perChunk,
                                    (positions + kMinPositions - 1) / kMinPositions, kMaxPartials / weights}),
                          1);
    c.per = std::max<int64_t>((positions + chunks - 1) / chunks, 1);
    c.chunks = std::max<int64_t>((positions + c.per - 1) / c.per, 1);
    return c;
  }

  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const override {
    Correlation c = correlation(op, in, attrs);
    Shape parts = c.weight;
    parts.push_back(c.chunks);
    return {TensorDesc{DType::F32, parts}};
  }

  uint64_t flops(const OpSpec&, std::span<const TensorView> inputs, std::span<const TensorView>,
                 const Attrs&) const override {
    // Each weight takes one product per element of A's planes (grad's,
    // input's when transposed), give or take the taps that fall off B.
    const TensorDesc& w = inputs[2].desc;
    const TensorDesc& a = transposed_ ? inputs[1].desc : inputs[0].desc;
    if (w.shape.empty() || w.shape[0] == 0) return 0;
    return 2 * uint64_t(a.numel() / w.shape[0]) * uint64_t(w.numel());
  }

  const KernelSource& source(DType dtype) const {
    return variants_.get("conv_weight_grad|" + std::string(dtypeName(dtype)), [&] {
      GlslBuilder b(dtype);
      b.output("part", DType::F32).input("a", dtype).input("b", dtype);
      b.define("CAB", std::to_string(kChannelsPerInvocation));
      return b.build(kernelFile("conv_backward.comp"));
    });
  }

  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs& attrs) const override {
    std::vector<TensorDesc> descs;
    for (const auto& v : in) descs.push_back(v.desc);
    Correlation c = correlation(op, descs, attrs);
    if (out[0].desc.numel() == 0) return;
    const ConvGeometry& g = c.conv;
    const uint64_t items = uint64_t(c.chunks * g.groups * c.blocks * c.bg * g.kh * g.kw);
    auto meta = words({c.n,  c.ca, c.ah, c.aw, c.cb, c.bh, c.bw, g.kh,  g.kw,     g.sh,
                       g.sw, g.ph, g.pw, g.dh, g.dw, c.ag, c.bg, c.per, c.blocks, c.chunks});
    const TensorView& a = transposed_ ? in[1] : in[0];
    const TensorView& b = transposed_ ? in[0] : in[1];
    CorrelationPush push{};
    push.part = out[0].buffer->deviceAddress();
    push.a = a.buffer->deviceAddress();
    push.b = b.buffer->deviceAddress();
    push.meta = r.params(meta);
    push.items = uint32_t(items);
    r.dispatch(source(descs[0].dtype), push, r.groupsFor(items, 256));
  }

  std::vector<const KernelSource*> variants(const OpSpec&, DType dtype) const override { return {&source(dtype)}; }

 private:
  int spatial_;
  bool transposed_;
  KernelVariants variants_;
};

// ---------------------------------------------------------------- pooling

struct PoolBackwardPush {
  uint64_t y, x, g, idx, meta;
  uint32_t items, mode;
};

class PoolBackward final : public KernelTemplate {
 public:
  PoolBackward(PoolKind kind, int spatial) : kind_(kind), spatial_(spatial) {}

  // in: grad, input.
  PoolGeometry geometry(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const {
    PoolGeometry g = poolGeometry(op, kind_, spatial_, in[1], attrs);
    expectGrad(op, in[0], g.out);
    return g;
  }

  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const override {
    geometry(op, in, attrs);
    return {in[1]};
  }

  const KernelSource& source(DType dtype, bool argmax) const {
    return variants_.get(std::string(argmax ? "pool_argmax|" : "pool_backward|") + std::string(dtypeName(dtype)), [&] {
      GlslBuilder b(dtype);
      b.output("y", dtype).input("x", dtype).input("g", dtype);
      if (argmax) b.define("ARGMAX");
      return b.build(kernelFile("pool_backward.comp"));
    });
  }

  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs& attrs) const override {
    const TensorDesc descs[] = {in[0].desc, in[1].desc};
    PoolGeometry g = geometry(op, descs, attrs);
    const uint64_t planes = uint64_t(g.in.n * g.in.c);
    const uint64_t outputs = planes * uint64_t(g.oh * g.ow), inputs = planes * uint64_t(g.in.h * g.in.w);
    if (inputs == 0) return;
    PoolBackwardPush push{};
    push.y = out[0].buffer->deviceAddress();
    push.x = in[1].buffer->deviceAddress();
    push.g = in[0].buffer->deviceAddress();
    push.meta = r.params(words(
        {g.in.h, g.in.w, g.oh, g.ow, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.includePad ? 1 : 0, g.divisor}));
    const DType dtype = in[1].desc.dtype;
    if (kind_ == PoolKind::kMax) {
      auto idx = r.scratch(std::max<uint64_t>(outputs * sizeof(int32_t), 16));
      push.idx = idx->deviceAddress();
      push.items = uint32_t(outputs);
      r.dispatch(source(dtype, true), push, r.groupsFor(outputs, 256));
    }
    push.items = uint32_t(inputs);
    push.mode = kind_ == PoolKind::kMax ? 0 : kind_ == PoolKind::kAvg ? 1 : 2;
    r.dispatch(source(dtype, false), push, r.groupsFor(inputs, 256));
  }

  std::vector<const KernelSource*> variants(const OpSpec&, DType dtype) const override {
    if (kind_ == PoolKind::kMax) return {&source(dtype, true), &source(dtype, false)};
    return {&source(dtype, false)};
  }

 private:
  PoolKind kind_;
  int spatial_;
  KernelVariants variants_;
};

// ---------------------------------------------------------------- interpolate

struct ResizeBackwardPush {
  uint64_t y, g, meta;
  uint32_t items, mode;
};

class InterpolateBackward final : public KernelTemplate {
 public:
  // in: grad, input.
  Resize resize(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const {
    Resize z = resizeGeometry(op, in[1], attrs);
    expectGrad(op, in[0], z.out);
    return z;
  }

  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const override {
    resize(op, in, attrs);
    return {in[1]};
  }

  const KernelSource& source(DType dtype) const {
    return variants_.get("interpolate_backward|" + std::string(dtypeName(dtype)), [&] {
      GlslBuilder b(dtype);
      b.output("y", dtype).input("g", dtype);
      return b.build(std::string(kernelFile("resize_index.glsl")) +
                     std::string(kernelFile("interpolate_backward.comp")));
    });
  }

  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs& attrs) const override {
    const TensorDesc descs[] = {in[0].desc, in[1].desc};
    Resize z = resize(op, descs, attrs);
    const uint64_t items = uint64_t(out[0].desc.numel());
    if (items == 0) return;
    const Shape& s = in[1].desc.shape;
    std::vector<uint32_t> meta = words({s[2], s[3], z.oh, z.ow});
    meta.push_back(floatBits(z.scaleH));
    meta.push_back(floatBits(z.scaleW));
    meta.push_back(z.alignCorners ? 1 : 0);
    ResizeBackwardPush push{};
    push.y = out[0].buffer->deviceAddress();
    push.g = in[0].buffer->deviceAddress();
    push.meta = r.params(meta);
    push.items = uint32_t(items);
    push.mode = uint32_t(z.mode);
    r.dispatch(source(in[1].desc.dtype), push, r.groupsFor(items, 256));
  }

  std::vector<const KernelSource*> variants(const OpSpec&, DType dtype) const override { return {&source(dtype)}; }

 private:
  KernelVariants variants_;
};

}  // namespace

std::shared_ptr<const KernelTemplate> convWeightGrad(int spatial, bool transposed) {
  return std::make_shared<ConvWeightGrad>(spatial, transposed);
}

std::shared_ptr<const KernelTemplate> poolBackward(PoolKind kind, int spatial) {
  return std::make_shared<PoolBackward>(kind, spatial);
}

std::shared_ptr<const KernelTemplate> interpolateBackward() { return std::make_shared<InterpolateBackward>(); }

}  // namespace tensord::compute
