// Convolution, pooling and resampling templates (see template_conv.h) and the
// GLSL they generate from kernels/conv.comp, pool.comp and interpolate.comp.

#include "compute/template_conv.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "compute/error.h"
#include "compute/glsl.h"
#include "compute/op_spec.h"
#include "compute/spirv_coop.h"
#include "compute/template_matmul.h"
#include "compute/template_shape.h"

namespace tensord::compute {
namespace {

constexpr int kOutChannelsPerInvocation = 4;  // OCB in conv.comp

std::string listStr(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string sizeStr(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "x" : "") + std::to_string(v[i]);
  return s;
}

// An int-list attribute with one value per spatial dim: one int applies to
// every dim (PyTorch's `stride=2`). Values must be >= `min`.
std::vector<int64_t> spatialAttr(const OpSpec& op, const Attrs& attrs, const std::string& name, int spatial,
                                 int64_t min) {
  std::vector<int64_t> v = attrs.getInts(name);
  if (v.size() == 1) v.assign(size_t(spatial), v[0]);
  if (v.size() != size_t(spatial)) {
    throwInvalid(op.name + ": attribute '" + name + "' is " + listStr(attrs.getInts(name)) + "; expected 1 or " +
                 std::to_string(spatial) + " ints");
  }
  // The upper bound keeps the shape arithmetic on these values from
  // overflowing; no output dim can exceed it anyway (see inferOutputs).
  for (int64_t x : v) {
    if (x < min || x > INT32_MAX) {
      throwInvalid(op.name + ": attribute '" + name + "' is " + listStr(v) + "; expected every value in [" +
                   std::to_string(min) + ", " + std::to_string(INT32_MAX) + "]");
    }
  }
  return v;
}

// `input` as [batch..., channels, spatial...]: checks the rank (spatial + 1
// for an unbatched input, spatial + 2 batched).
Planes planesOf(const OpSpec& op, const TensorDesc& in, int spatial, const std::string& what) {
  size_t r = in.rank();
  if (r != size_t(spatial + 1) && r != size_t(spatial + 2)) {
    throwInvalid(op.name + ": input 'input' has shape " + shapeStr(in.shape) + "; expected " + what + " (rank " +
                 std::to_string(spatial + 1) + " or " + std::to_string(spatial + 2) + "), got rank " +
                 std::to_string(r));
  }
  Planes p;
  p.batched = r == size_t(spatial + 2);
  size_t k = 0;
  if (p.batched) p.n = in.shape[k++];
  p.c = in.shape[k++];
  if (spatial == 2) p.h = in.shape[k++];
  p.w = in.shape[k];
  return p;
}

Shape outShape(const Planes& p, int64_t c, int spatial, int64_t oh, int64_t ow) {
  Shape s;
  if (p.batched) s.push_back(p.n);
  s.push_back(c);
  if (spatial == 2) s.push_back(oh);
  s.push_back(ow);
  return s;
}

void checkSpatialNonEmpty(const OpSpec& op, const TensorDesc& in, const Planes& p) {
  if (p.h <= 0 || p.w <= 0) {
    throwInvalid(op.name + ": input 'input' has shape " + shapeStr(in.shape) +
                 "; expected non-zero spatial dims");
  }
}

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

// ---------------------------------------------------------------- conv

struct ConvPush {
  uint64_t y, x, w, b, meta;
  uint32_t items, hasBias;
};

// The implicit GEMM (kernels/conv_gemm.comp): per group and output phase,
// output channels x output pixels, K = input channels of the group x taps.
struct GemmTile {
  int bm = 64, bn = 64;      // output channels x pixels per workgroup
  int bk = 8;                // K step
  bool weightVec4 = false;   // weight rows contiguous along K, K a multiple of 4, aligned
  bool coop = false;         // f16/bf16 on tensor cores (kernels/conv_gemm_coop.comp)
  bool tapMajor = false;     // ... K over taps, then channels (input channels a multiple of bk)
  int wm = 32, wn = 32;      // ... each subgroup's outputs
  bool allInside = false;    // no padding, not transposed: conv_gemm.comp's X_ALL_INSIDE
};
// The tensor-core tiles: 64 output channels x 128 pixels in K steps of 32,
// 8 subgroups of 32x32 outputs; where K runs over taps first (input channels
// a multiple of 32), 256 pixels and subgroups of 32x64, since that kernel's
// epilogue reuses the weight tile's shared memory. On an H100 at ResNet's f16
// shapes the wide tile ran 5-35% faster than 64x128; 128x128 tiles (64x32
// or 32x64 per subgroup) 10-25% slower on the 64- and 128-channel layers.
// Through the KHR extension, 4 subgroups of 32x128 or 64x64 (the matmul's
// best) were 20% faster on the 128-channel layer and 10-15% slower on the
// others.
constexpr GemmTile kGemmCoopTile{64, 128, 32, false, true};
constexpr GemmTile kGemmCoopTapTile{64, 256, 32, false, true, true, 32, 64};
constexpr int kGemmMetaHead = 24, kGemmMetaPerPhase = 16;
// conv_transpose with more stride phases than this stays direct (its meta
// would grow and each phase's tap set would be tiny).
constexpr int64_t kGemmMaxPhases = 64;
// Fewer output channels per group than this leave most of a 64-row tile
// idle, fewer products per output than this (K) make the tile loads dominate:
// the direct kernel wins there (depthwise convs, an RGB head).
constexpr int64_t kGemmMinChannels = 16, kGemmMinK = 16;
// Tiles are 64 output channels high: measured on an H100 at ResNet shapes,
// 128x128 and 128x64 tiles ran 5-40% slower than 64x128 and 64x64 ones, and
// 64x256 ones 5-25% slower. With vector weight loads and a kernel of more
// than one tap, 64x64 tiles in K steps of 16 ran fastest (5-20%); otherwise
// K steps of 8, and 128 pixels wide where that leaves this many workgroups
// (fewer, and 64-pixel tiles fill the GPU better): 384 on an H100's 132
// SMs, scaled to the device's compute units where it reports them
// (gemmTile; at least 16).
constexpr int64_t kGemmWideTiles = 384;

struct ConvGemmPush {
  uint64_t y, x, w, b, meta;
};

// Winograd F(m x m, 3x3) (kernels/conv_winograd.comp): conv2d with 3x3
// kernels, stride 1, dilation 1 and one group runs as an input transform, a
// weight transform, (m + 2)^2 batched products on the matmul kernels and an
// output transform. f32 takes F(4x4, 3x3) (kWinogradF32Tile): 36
// multiplications per 4x4 outputs and channel pair instead of 144, and
// intermediates (the transformed input and the products) of 2.25 values per
// input or output element. f16 and bf16 take F(2x2, 3x3): 16 for 36, and 4
// values per element; F(4x4, 3x3)'s transforms, which scale values by up to
// 8 and round them, would lose too much in 16-bit operands. The
// intermediates and the transformed weight are scratch memory, at most
// kWinogradMaxScratch of it, else the implicit GEMM runs. In f32 the
// products run on the f32 matmul kernels. In f16 and bf16 the path is taken
// only on tensor cores: the transformed input and weight are stored in the
// tensor's dtype (the tensor-core operands; the transforms compute in f32),
// and the products are stored in f32 (the matmul kernel's Y_F32), so the
// output transform sums unrounded products and no product overflows f16.
// In f16 the transformed input and weight are stored scaled by 1/4, which
// keeps them in range for any f16 input and weight (conv_winograd.comp,
// SCALE). Scratch memory lives until the batch the call is in has finished;
// later calls of the batch reuse it (Recorder::scratch).
//
// It pays where channels are many. In f16 and bf16: input c and output o
// channels with c * o >= kWinogradMinChannels * (c + o), that is about
// twice that many of each. In f32 also wherever both are at least
// kWinogradMinChannels (the products' rows are o, and the fast matmul
// kernel takes 64 or more): on an H100 ResNet's 64-channel 3x3
// convolutions at 56x56 (8 and 32 images) ran at 27.6-30.8 TFLOP/s through
// F(2x2, 3x3) against 24.2-26.8 on the implicit GEMM, and at 35.8-48.4
// through F(4x4, 3x3), while the same in f16 fell from 92 to 44 (the
// implicit GEMM on tensor cores).
constexpr int64_t kWinogradMaxScratch = int64_t(256) << 20, kWinogradMinChannels = 64;

// The tile of f32's Winograd path. On an H100, F(4x4, 3x3) against F(2x2,
// 3x3), alternately in one lease (op_bench --no-client --repeats 10, two
// rounds, TFLOP/s of the direct convolution): ResNet-50's 3x3 layers
// 32x64x56x56 31.3 -> 47.9-48.4, 32x128x28x28 49.4-49.7 -> 63.8,
// 32x256x14x14 60.7-61.2 -> 73.1-73.3 (16x16 outputs computed for 14x14),
// 8x64x56x56 28.3-29.4 -> 35.8-36.6. Its rounding errors are larger
// (docs/design.md, "Winograd convolutions").
constexpr int64_t kWinogradF32Tile = 4;

struct WinogradPush {
  uint64_t y, x, b, meta;
};

// A matrix product a conv runs on the matmul kernels, as an internal op.
OpSpec productSpec(std::string name, MatmulKind kind, std::vector<DType> dtypes) {
  OpSpec s;
  s.name = std::move(name);
  s.inputs = {{"a", InputRole::kData}, {"b", InputRole::kData}};
  s.outputs = {"out"};
  s.dtypes = std::move(dtypes);
  s.kernel = matmul(kind);
  return s;
}

// A 1x1 convolution of stride 1, without padding, groups or bias, is the
// product weight [O, C] @ input [N, C, H * W] -> [N, O, H * W], already in
// NCHW, and runs on the matmul kernels (the implicit GEMM's gather and
// bounds tests are dead weight there): in f16 and bf16 on tensor cores, in
// f32 on the fast kernel or tensor cores (split into bf16 parts). On an H100
// ResNet-50's f32 1x1 convolutions at 28x28 and 56x56 went from 13-22 to
// 27-30 TFLOP/s on the fast kernel (docs/PERFORMANCE.md).
const OpSpec& pointwiseProductSpec() {
  static const OpSpec spec =
      productSpec("conv2d (1x1 product)", MatmulKind::kMatmul, {DType::F32, DType::F16, DType::BF16});
  return spec;
}

// [A, B, C] -> [B, A, C] (the remap kernel), for the channel-major product
// below.
const OpSpec& swapLeadingSpec() {
  static const OpSpec spec = [] {
    OpSpec s;
    s.name = "conv2d (channel-major copy)";
    s.inputs = {{"x", InputRole::kData}};
    s.outputs = {"out"};
    s.dtypes = {DType::F32};
    s.kernel = remap([](const OpSpec&, std::span<const TensorDesc> in, const Attrs&) {
      const Shape& x = in[0].shape;  // [A, B, C]
      RemapCopy c;
      c.dims = {RemapDim{.size = x[1], .outStride = x[0] * x[2], .inStride = x[2], .inSize = x[1]},
                RemapDim{.size = x[0], .outStride = x[2], .inStride = x[1] * x[2], .inSize = x[0]},
                RemapDim{.size = x[2], .outStride = 1, .inStride = 1, .inSize = x[2]}};
      return RemapPlan{.outputs = {TensorDesc{in[0].dtype, {x[1], x[0], x[2]}}}, .copies = {c}};
    });
    return s;
  }();
  return spec;
}

// The product step of the Winograd path, as bmm: [P, O, C] @ [P, C, TP]
// for the P = (m + 2)^2 points of the transforms.
const OpSpec& winogradProductSpec() {
  static const OpSpec spec = productSpec("conv2d (Winograd product)", MatmulKind::kBmm, {DType::F32});
  return spec;
}

// One output phase of the GEMM (conv_gemm.comp's per-phase meta words).
struct GemmPhase {
  int64_t rh = 0, rw = 0, ohp = 0, owp = 0, khp = 0, kwp = 0, bh = 0, mh = 1, bw = 0, mw = 1, wh0 = 0, wsh = 1,
          ww0 = 0, wsw = 1;
};

// One spatial dim of a transposed conv's phase: the outputs r + stride * i
// (count) take the taps w0 + step * t (taps of them), which read input
// i + b + m * t.
struct PhaseDim {
  int64_t count = 0, taps = 0, b = 0, m = 0, w0 = 0, step = 1;
};

PhaseDim transposedPhaseDim(int64_t r, int64_t out, int64_t k, int64_t s, int64_t p, int64_t d) {
  PhaseDim pd;
  pd.count = r < out ? (out - r + s - 1) / s : 0;
  pd.step = s / std::gcd(s, d);
  for (int64_t kh = 0; kh < std::min(k, pd.step); ++kh) {
    if (((r + p - kh * d) % s + s) % s == 0) {
      pd.w0 = kh;
      pd.taps = (k - 1 - kh) / pd.step + 1;
      pd.b = (r + p - kh * d) / s;  // exact
      pd.m = -(pd.step * d) / s;    // exact: step * d is a multiple of s
      break;
    }
  }
  return pd;
}

class Conv final : public KernelTemplate {
 public:
  Conv(int spatial, bool transposed) : spatial_(spatial), transposed_(transposed) {}

  // Each output (each input, transposed) element takes one multiply-add per
  // weight of one output (input) channel.
  uint64_t flops(const OpSpec&, std::span<const TensorView> inputs, std::span<const TensorView> outputs,
                 const Attrs&) const override {
    const TensorDesc& w = inputs[1].desc;
    if (w.shape.empty() || w.shape[0] == 0) return 0;
    const uint64_t perElement = uint64_t(w.numel() / w.shape[0]);
    return 2 * uint64_t(transposed_ ? inputs[0].desc.numel() : outputs[0].desc.numel()) * perElement;
  }

  ConvGeometry geometry(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const {
    const std::string name = op.name;
    const int s = spatial_;
    ConvGeometry g;
    g.in = planesOf(op, in[0], s, s == 2 ? "[N, C, H, W] or [C, H, W]" : "[N, C, L] or [C, L]");
    const TensorDesc& w = in[1];
    if (w.rank() != size_t(s + 2)) {
      throwInvalid(name + ": input 'weight' has shape " + shapeStr(w.shape) + "; expected rank " +
                   std::to_string(s + 2) + (transposed_ ? " [in_channels, out_channels/groups, kernel...]"
                                                        : " [out_channels, in_channels/groups, kernel...]") +
                   ", got rank " + std::to_string(w.rank()));
    }
    auto stride = spatialAttr(op, attrs, "stride", s, 1);
    auto padding = spatialAttr(op, attrs, "padding", s, 0);
    auto dilation = spatialAttr(op, attrs, "dilation", s, 1);
    g.groups = attrs.getInt("groups");
    if (g.groups < 1) throwInvalid(name + ": attribute 'groups' is " + std::to_string(g.groups) + "; expected >= 1");
    const int64_t c = g.in.c;
    if (c % g.groups != 0) {
      throwInvalid(name + ": attribute 'groups' is " + std::to_string(g.groups) +
                   "; expected a divisor of the input's channel count " + std::to_string(c) + " (input " +
                   shapeStr(in[0].shape) + ")");
    }
    std::vector<int64_t> kernel(w.shape.end() - s, w.shape.end());
    if (transposed_) {
      if (w.shape[0] != c) {
        throwInvalid(name + ": input 'weight' has shape " + shapeStr(w.shape) + "; expected dim 0 to be " +
                     std::to_string(c) + " (the input's channels, input " + shapeStr(in[0].shape) + "), got " +
                     std::to_string(w.shape[0]));
      }
      g.o = w.shape[1] * g.groups;
    } else {
      g.o = w.shape[0];
      if (g.o % g.groups != 0) {
        throwInvalid(name + ": attribute 'groups' is " + std::to_string(g.groups) +
                     "; expected a divisor of the weight's out_channels " + std::to_string(g.o) + " (weight " +
                     shapeStr(w.shape) + ")");
      }
      if (w.shape[1] * g.groups != c) {
        throwInvalid(name + ": input 'weight' has shape " + shapeStr(w.shape) + "; expected dim 1 to be " +
                     std::to_string(c / g.groups) + " (input channels " + std::to_string(c) + " / groups " +
                     std::to_string(g.groups) + "), got " + std::to_string(w.shape[1]));
      }
    }
    for (int64_t k : kernel) {
      if (k <= 0) throwInvalid(name + ": input 'weight' has shape " + shapeStr(w.shape) + "; expected a non-empty kernel");
    }
    if (in.size() > 2) {
      g.bias = true;
      if (in[2].shape != Shape{g.o}) {
        throwInvalid(name + ": input 'bias' has shape " + shapeStr(in[2].shape) + "; expected [" +
                     std::to_string(g.o) + "] (out_channels)");
      }
    }
    std::vector<int64_t> size = s == 2 ? std::vector<int64_t>{g.in.h, g.in.w} : std::vector<int64_t>{g.in.w};
    std::vector<int64_t> out(static_cast<size_t>(s));
    if (transposed_) {
      auto outputPadding = spatialAttr(op, attrs, "output_padding", s, 0);
      for (int d = 0; d < s; ++d) {
        if (outputPadding[d] >= stride[d] && outputPadding[d] >= dilation[d]) {
          throwInvalid(name + ": attribute 'output_padding' is " + listStr(outputPadding) +
                       "; expected each value smaller than the stride " + listStr(stride) + " or the dilation " +
                       listStr(dilation));
        }
        out[d] = (size[d] - 1) * stride[d] - 2 * padding[d] + dilation[d] * (kernel[d] - 1) + outputPadding[d] + 1;
      }
      for (int d = 0; d < s; ++d) {
        if (out[d] <= 0 || size[d] <= 0) {
          throwInvalid(name + ": the output size would be " + sizeStr(out) + " (input " + shapeStr(in[0].shape) +
                       ", kernel " + sizeStr(kernel) + ", padding " + listStr(padding) +
                       "); expected every output dim >= 1 and a non-empty input");
        }
      }
    } else {
      for (int d = 0; d < s; ++d) {
        int64_t padded = size[d] + 2 * padding[d], span = dilation[d] * (kernel[d] - 1) + 1;
        if (padded < span) {
          std::vector<int64_t> p(size), k(kernel);
          for (int e = 0; e < s; ++e) {
            p[e] = size[e] + 2 * padding[e];
            k[e] = dilation[e] * (kernel[e] - 1) + 1;
          }
          throwInvalid(name + ": the padded input is " + sizeStr(p) + " (input " + shapeStr(in[0].shape) +
                       ", padding " + listStr(padding) + ") but the dilated kernel is " + sizeStr(k) +
                       "; expected the kernel to fit in the padded input");
        }
        out[d] = (padded - span) / stride[d] + 1;
      }
    }
    if (s == 2) {
      g.kh = kernel[0], g.kw = kernel[1], g.oh = out[0], g.ow = out[1];
      g.sh = stride[0], g.sw = stride[1], g.ph = padding[0], g.pw = padding[1];
      g.dh = dilation[0], g.dw = dilation[1];
    } else {
      g.kw = kernel[0], g.ow = out[0], g.sw = stride[0], g.pw = padding[0], g.dw = dilation[0];
    }
    g.out = outShape(g.in, g.o, s, g.oh, g.ow);
    return g;
  }

  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const override {
    return {TensorDesc{in[0].dtype, geometry(op, in, attrs).out}};
  }

  const KernelSource& source(const OpSpec& op, DType dtype) const {
    std::string key = op.name + "|" + std::string(dtypeName(dtype));
    return variants_.get(key, [&] {
      GlslBuilder b(dtype);
      b.output("y", dtype).input("x", dtype).input("w", dtype).input("b", dtype);
      b.define("OCB", std::to_string(kOutChannelsPerInvocation));
      if (transposed_) b.define("TRANSPOSED");
      return b.build(kernelFile("conv.comp"));
    });
  }

  const KernelSource& gemmSource(DType dtype, const GemmTile& tile) const {
    std::string key = "conv_gemm|" + std::string(dtypeName(dtype)) + "|" + std::to_string(tile.bm) + "x" +
                      std::to_string(tile.bn) + "x" + std::to_string(tile.bk) + (tile.weightVec4 ? "|v4" : "|v1") +
                      (tile.coop ? "|coop" + std::to_string(tile.wm) + "x" + std::to_string(tile.wn) : "") +
                      (tile.tapMajor ? "|taps" : "") + (tile.allInside ? "|inside" : "");
    return variants_.get(key, [&] {
      GlslBuilder b(dtype);
      b.output("y", dtype).input("x", dtype).input("w", dtype).input("b", dtype);
      b.define("BM", std::to_string(tile.bm) + "u").define("BN", std::to_string(tile.bn) + "u");
      b.define("BK", std::to_string(tile.bk) + "u");
      if (tile.weightVec4) b.define("WEIGHT_VEC4");
      if (tile.allInside) b.define("X_ALL_INSIDE");
      if (tile.coop) {
        b.define("WM", std::to_string(tile.wm) + "u").define("WN", std::to_string(tile.wn) + "u");
        b.define("NT", std::to_string((tile.bm / tile.wm) * (tile.bn / tile.wn) * 32) + "u");
        if (tile.tapMajor) b.define("TAP_MAJOR");
        if (dtype == DType::BF16) b.define(std::string(kBf16OperandsDefine));
        return b.build(kernelFile("conv_gemm_coop.comp"));
      }
      return b.build(kernelFile("conv_gemm.comp"));
    });
  }

  // The GEMM's output phases: one for a conv, one per residue of the output
  // position modulo the stride for a transposed conv (each a conv of stride
  // 1 over the taps that land on whole input positions).
  std::vector<GemmPhase> gemmPhases(const ConvGeometry& g) const {
    if (!transposed_) {
      GemmPhase ph;
      ph.ohp = g.oh, ph.owp = g.ow, ph.khp = g.kh, ph.kwp = g.kw, ph.mh = g.dh, ph.mw = g.dw;
      return {ph};
    }
    std::vector<GemmPhase> phases;
    for (int64_t rh = 0; rh < g.sh; ++rh) {
      const PhaseDim dh = transposedPhaseDim(rh, g.oh, g.kh, g.sh, g.ph, g.dh);
      if (dh.count == 0) continue;
      for (int64_t rw = 0; rw < g.sw; ++rw) {
        const PhaseDim dw = transposedPhaseDim(rw, g.ow, g.kw, g.sw, g.pw, g.dw);
        if (dw.count == 0) continue;
        GemmPhase ph;
        ph.rh = rh, ph.rw = rw, ph.ohp = dh.count, ph.owp = dw.count;
        if (dh.taps > 0 && dw.taps > 0) {  // else no tap reaches these outputs: the bias alone
          ph.khp = dh.taps, ph.kwp = dw.taps;
          ph.bh = dh.b, ph.mh = dh.m, ph.bw = dw.b, ph.mw = dw.m;
          ph.wh0 = dh.w0, ph.wsh = dh.step, ph.ww0 = dw.w0, ph.wsw = dw.step;
        }
        phases.push_back(ph);
      }
    }
    return phases;
  }

  // Whether the implicit GEMM should run this call (see kGemmMinChannels).
  bool useGemm(const ConvGeometry& g) const {
    const int64_t cg = g.in.c / g.groups, og = g.o / g.groups;
    if (og < kGemmMinChannels) return false;
    if (transposed_) {
      if (g.sh * g.sw > kGemmMaxPhases) return false;
      return cg * g.kh * g.kw >= kGemmMinK * g.sh * g.sw;  // the taps of one phase, on average
    }
    return cg * g.kh * g.kw >= kGemmMinK;
  }

  // Whether this call is a product: a 2-D 1x1 convolution of stride 1
  // without padding, groups or bias (see pointwiseProductSpec).
  bool isPointwise(const ConvGeometry& g) const {
    if (spatial_ != 2 || transposed_ || g.bias || g.groups != 1 || !useGemm(g)) return false;
    return g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
  }

  // Whether this call runs as a product on the matmul kernels (see
  // pointwiseProductSpec).
  bool usePointwiseProduct(const ConvGeometry& g, DType dtype, const DeviceFeatures* features,
                           std::span<const TensorView> in) const {
    if (!isPointwise(g)) return false;
    // f32: with 64 or more output channels and 256 or more pixels per image.
    // The product's columns are one image's pixels; the implicit GEMM runs
    // over all images' at once, which wastes less of its tiles on small
    // images: on an H100 ResNet-50's 14x14 layer ran at 25.9-26.0 TFLOP/s
    // there against 24.9 as a product, and its 7x7 layer (too few columns
    // for the fast kernel) 19.3-19.5 against 15.0-16.1.
    // Where f32 products run on tensor cores (split into bf16 parts), the
    // product wins at 14x14 as well: 196 pixels, a multiple of 4 as that
    // kernel needs (measured below at "f32 products on tensor cores").
    const bool aligned = in[0].buffer->deviceAddress() % 16 == 0 && in[1].buffer->deviceAddress() % 16 == 0;
    if (dtype == DType::F32) {
      if (g.o >= 64 && g.in.h * g.in.w >= 256) return true;
      return aligned && tensorCoreProductF32(features, dtype, g.in.n, g.o, g.in.h * g.in.w, g.in.c);
    }
    if (dtype != DType::F16 && dtype != DType::BF16) return false;
    if (!aligned) return false;
    // The tensor-core kernel's conditions on the sizes; its output type does not enter them.
    return tensorCoreProductF32(features, dtype, g.in.n, g.o, g.in.h * g.in.w, g.in.c);
  }

  // f32 1x1 convolutions whose images have a pixel count that is not a
  // multiple of 4 (ResNet-50's 7x7 layer), on devices whose f32 products run
  // on tensor cores: the input copied channel-major, [C, N * H * W], one
  // product weight [O, C] @ [C, N * H * W] over all images' pixels at once
  // (a multiple of 4 where N * H * W is), and the result copied back to
  // NCHW. On an H100 that layer (32 images, 2048 -> 512 channels) ran at
  // 24.0-24.2 TFLOP/s against 19.3-20.5 on the implicit GEMM and PyTorch's
  // 21.7-21.9 (docs/PERFORMANCE.md).
  bool useChannelMajorProduct(const ConvGeometry& g, DType dtype, const DeviceFeatures* features,
                              std::span<const TensorView> in) const {
    if (dtype != DType::F32 || !isPointwise(g) || in[1].buffer->deviceAddress() % 16 != 0) return false;
    return tensorCoreProductF32(features, dtype, 1, g.o, g.in.n * g.in.h * g.in.w, g.in.c);
  }

  // Returns false, having recorded nothing, where the scratch memory is not
  // to be had.
  bool recordChannelMajorProduct(Recorder& r, const ConvGeometry& g, std::span<const TensorView> in,
                                 const TensorView& out) const {
    const int64_t pixels = g.in.h * g.in.w, columns = g.in.n * pixels;
    std::shared_ptr<Buffer> xt, yt;
    try {
      xt = r.scratch(uint64_t(g.in.c * columns) * 4);
      yt = r.scratch(uint64_t(g.o * columns) * 4);
    } catch (const ComputeError& e) {
      if (e.kind() != ComputeError::Kind::kOutOfMemory) throw;
      return false;
    }
    const OpSpec& swap = swapLeadingSpec();
    const TensorView x[] = {{TensorDesc{DType::F32, {g.in.n, g.in.c, pixels}}, in[0].buffer}};
    const TensorView xtView[] = {{TensorDesc{DType::F32, {g.in.c, g.in.n, pixels}}, xt}};
    swap.kernel->record(swap, r, x, xtView, Attrs{});
    const TensorView operands[] = {{TensorDesc{DType::F32, {g.o, g.in.c}}, in[1].buffer},
                                   {TensorDesc{DType::F32, {g.in.c, columns}}, xt}};
    const TensorView product[] = {{TensorDesc{DType::F32, {g.o, columns}}, yt}};
    const OpSpec& spec = pointwiseProductSpec();
    spec.kernel->record(spec, r, operands, product, Attrs{});
    const TensorView y[] = {{TensorDesc{DType::F32, {g.o, g.in.n, pixels}}, yt}};
    const TensorView outView[] = {{TensorDesc{DType::F32, {g.in.n, g.o, pixels}}, out.buffer}};
    swap.kernel->record(swap, r, y, outView, Attrs{});
    return true;
  }

  void recordPointwiseProduct(Recorder& r, const ConvGeometry& g, std::span<const TensorView> in,
                              const TensorView& out) const {
    const DType dtype = out.desc.dtype;
    const int64_t pixels = g.in.h * g.in.w;
    const TensorView operands[] = {{TensorDesc{dtype, {g.o, g.in.c}}, in[1].buffer},
                                   {TensorDesc{dtype, {g.in.n, g.in.c, pixels}}, in[0].buffer}};
    const TensorView product[] = {{TensorDesc{dtype, {g.in.n, g.o, pixels}}, out.buffer}};
    const OpSpec& spec = pointwiseProductSpec();
    spec.kernel->record(spec, r, operands, product, Attrs{});
  }

  // Whether the Winograd path should run this call (see kWinogradMaxScratch).
  bool useWinograd(const ConvGeometry& g, DType dtype, const DeviceFeatures* features) const {
    if (spatial_ != 2 || transposed_ || !useGemm(g)) return false;
    if (g.kh != 3 || g.kw != 3 || g.sh != 1 || g.sw != 1 || g.dh != 1 || g.dw != 1 || g.groups != 1) return false;
    const bool wide = g.in.c * g.o >= kWinogradMinChannels * (g.in.c + g.o);
    if (!wide && !(dtype == DType::F32 && std::min(g.in.c, g.o) >= kWinogradMinChannels)) return false;
    const int64_t m = winogradTile(dtype), points = (m + 2) * (m + 2), tp = winogradColumns(g, m);
    if (dtype != DType::F32 && !tensorCoreProductF32(features, dtype, points, g.o, tp, g.in.c)) return false;
    if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16) return false;
    // Elements of V or M, and of the input and the output, are indexed in 32 bits.
    const int64_t widest =
        std::max({points * std::max(g.in.c, g.o) * tp, g.in.n * g.in.c * g.in.h * g.in.w, g.in.n * g.o * g.oh * g.ow});
    const int64_t scratch = points * (int64_t(dtypeSize(dtype)) * (g.in.c * tp + g.o * g.in.c) + 4 * g.o * tp);
    return widest < (int64_t(1) << 31) && scratch <= kWinogradMaxScratch;
  }

  // The side m of the output tiles, F(m x m, 3x3): 4 in f32, 2 in f16 and
  // bf16 (see kWinogradF32Tile).
  static int64_t winogradTile(DType dtype) { return dtype == DType::F32 ? kWinogradF32Tile : 2; }

  // Columns of the transformed input and of the products: one per m x m
  // tile of outputs, rounded up to a multiple of 8.
  static int64_t winogradColumns(const ConvGeometry& g, int64_t m) {
    const int64_t tiles = g.in.n * ((g.oh + m - 1) / m) * ((g.ow + m - 1) / m);
    return (tiles + 7) / 8 * 8;
  }

  // `dtype`: the tensors' (it picks the tile, winogradTile). The transforms
  // write (input, weight) or read (output: the products) f32 where noted above.
  const KernelSource& winogradSource(const std::string& mode, DType dtype) const {
    const int64_t m = winogradTile(dtype);
    const std::string key = "conv_winograd|" + mode + "|" + std::string(dtypeName(dtype)) + "|F" + std::to_string(m);
    return variants_.get(key, [&] {
      GlslBuilder b(DType::F32);
      if (mode == "WG_OUTPUT")
        b.output("y", dtype).input("x", DType::F32).input("b", dtype);
      else
        b.output("y", dtype).input("x", dtype).input("b", dtype);
      b.define(mode);
      b.define("WG_M", std::to_string(m));
      if (dtype == DType::F16) b.define("SCALE", "0.25");  // no transform overflows f16
      return b.build(kernelFile("conv_winograd.comp"));
    });
  }

  // Returns false, having recorded nothing, where the scratch memory is not
  // to be had: the implicit GEMM needs none.
  bool recordWinograd(Recorder& r, const ConvGeometry& g, std::span<const TensorView> in,
                      const TensorView& out) const {
    const DType dtype = out.desc.dtype;
    const uint64_t size = dtypeSize(dtype);
    const int64_t tile = winogradTile(dtype), points = (tile + 2) * (tile + 2);
    const int64_t c = g.in.c, o = g.o, th = (g.oh + tile - 1) / tile, tw = (g.ow + tile - 1) / tile;
    const int64_t tp = winogradColumns(g, tile);
    std::shared_ptr<Buffer> u, v, m;
    try {
      u = r.scratch(uint64_t(points * o * c) * size);
      v = r.scratch(uint64_t(points * c * tp) * size);
      m = r.scratch(uint64_t(points * o * tp) * 4);
    } catch (const ComputeError& e) {
      if (e.kind() != ComputeError::Kind::kOutOfMemory) throw;
      return false;
    }
    std::vector<uint32_t> meta = words({g.in.n, c, g.in.h, g.in.w, o, g.oh, g.ow, g.ph, g.pw, th, tw,
                                        g.in.n * th * tw, tp, g.bias ? 1 : 0, 0});
    auto pass = [&](const std::string& mode, uint64_t y, uint64_t x, uint64_t b, int64_t items) {
      meta[14] = uint32_t(items);
      WinogradPush push{y, x, b, r.params(meta)};
      r.dispatch(winogradSource(mode, dtype), push, r.groupsFor(uint64_t(items), 256));
    };
    pass("WG_WEIGHT", u->deviceAddress(), in[1].buffer->deviceAddress(), 0, o * c);
    pass("WG_INPUT", v->deviceAddress(), in[0].buffer->deviceAddress(), 0, c * tp);
    if (dtype == DType::F32) {
      const TensorView operands[] = {{TensorDesc{DType::F32, {points, o, c}}, u},
                                     {TensorDesc{DType::F32, {points, c, tp}}, v}};
      const TensorView products[] = {{TensorDesc{DType::F32, {points, o, tp}}, m}};
      const OpSpec& product = winogradProductSpec();
      product.kernel->record(product, r, operands, products, Attrs{});
    } else {
      recordTensorCoreProductF32(r, dtype, u->deviceAddress(), v->deviceAddress(), m->deviceAddress(), points, o, tp,
                                 c);
    }
    pass("WG_OUTPUT", out.buffer->deviceAddress(), m->deviceAddress(), g.bias ? in[2].buffer->deviceAddress() : 0,
         o * tp);
    return true;
  }

  // Whether the tensor-core kernel can run K over taps first (TAP_MAJOR).
  bool tapMajor(const ConvGeometry& g) const {
    return !transposed_ && (g.in.c / g.groups) % kGemmCoopTapTile.bk == 0;
  }

  // The tile for this call; `weightVec4`: the weight moves as vectors
  // (a conv, not transposed, K a multiple of 4, an aligned weight).
  // `features`: the device class (shared memory, compute units); nullptr: an H100's.
  GemmTile gemmTile(const ConvGeometry& g, int64_t pixels, int64_t units, bool weightVec4, bool coop,
                    const DeviceFeatures* features) const {
    const int64_t og = g.o / g.groups;
    GemmTile t;
    t.weightVec4 = weightVec4;
    if (coop) {
      if (tapMajor(g)) return kGemmCoopTapTile;
      t = kGemmCoopTile;
      t.weightVec4 = weightVec4;
      return t;
    }
    // K steps of 16 take 17 KiB of shared memory (conv_gemm.comp's As and
    // Bs), more than the 16 KiB some devices have.
    const bool steps16 = !features || features->sharedMemoryBytes >= 2 * 16 * 2 * (64 / 4 + 1) * 16;
    if (weightVec4 && g.kh * g.kw > 1 && steps16) {
      t.bk = 16;  // half the barriers; with scalar weights or 1x1 kernels measured slower
      return t;
    }
    // 64-pixel tiles unless 128-pixel ones still give each SM of the GPU
    // about three workgroups (kGemmWideTiles on an H100's 132 SMs).
    int64_t wide = kGemmWideTiles;
    if (features && features->computeUnits > 0)
      wide = std::max<int64_t>(16, features->computeUnits * kGemmWideTiles / 132);
    if (units * ((og + 63) / 64) * ((pixels + 127) / 128) >= wide) t.bn = 128;
    return t;
  }

  void recordGemm(Recorder& r, const ConvGeometry& g, std::span<const TensorView> in, const TensorView& out) const {
    const int64_t cg = g.in.c / g.groups, og = g.o / g.groups;
    const std::vector<GemmPhase> phases = gemmPhases(g);
    if (phases.empty()) return;
    std::vector<int64_t> meta = {g.in.n, g.in.c, g.in.h, g.in.w, g.o, g.oh, g.ow, g.groups, cg, og};
    if (!transposed_) {
      // Pixel (n, i, j) reads input (i * stride - padding, ...) at tap 0;
      // weight [O, CG, KH, KW].
      meta.insert(meta.end(), {g.sh, g.sw, g.ph, g.pw, 1, 1, cg * g.kh * g.kw, g.kh * g.kw, og * cg * g.kh * g.kw});
    } else {
      // Pixel (n, i, j) of a phase is output (r + stride * i, ...); weight [C, OG, KH, KW].
      meta.insert(meta.end(), {1, 1, 0, 0, g.sh, g.sw, g.kh * g.kw, og * g.kh * g.kw, cg * og * g.kh * g.kw});
    }
    meta.insert(meta.end(), {g.kw, g.bias ? 1 : 0, int64_t(phases.size())});
    meta.resize(size_t(kGemmMetaHead), 0);
    int64_t pixels = 0;
    for (const GemmPhase& ph : phases) {
      meta.insert(meta.end(), {ph.rh, ph.rw, ph.ohp, ph.owp, ph.khp, ph.kwp, ph.bh, ph.mh, ph.bw, ph.mw, ph.wh0,
                               ph.wsh, ph.ww0, ph.wsw});
      meta.resize(meta.size() + size_t(kGemmMetaPerPhase - 14), 0);
      pixels = std::max(pixels, g.in.n * ph.ohp * ph.owp);
    }
    std::vector<uint32_t> words;
    for (int64_t v : meta) words.push_back(uint32_t(int32_t(v)));
    const int64_t units = int64_t(phases.size()) * g.groups;
    const uint64_t vectorBytes = 4 * dtypeSize(in[1].desc.dtype);
    const bool weightVec4 =
        !transposed_ && (cg * g.kh * g.kw) % 4 == 0 && in[1].buffer->deviceAddress() % vectorBytes == 0;
    const DeviceFeatures* features = r.features();
    // bf16 only where K runs over taps first (its other path keeps f16 values in shared memory).
    const DType dtype = in[0].desc.dtype;
    const bool coop = features && ((dtype == DType::F16 && features->coopMatrixF16) ||
                                   (dtype == DType::BF16 && features->coopMatrixBf16 && tapMajor(g)));
    GemmTile tile = gemmTile(g, pixels, units, weightVec4, coop, features);
    tile.allInside = !coop && !transposed_ && g.ph == 0 && g.pw == 0;
    ConvGemmPush push{};
    push.y = out.buffer->deviceAddress();
    push.x = in[0].buffer->deviceAddress();
    push.w = in[1].buffer->deviceAddress();
    push.b = g.bias ? in[2].buffer->deviceAddress() : 0;
    push.meta = r.params(words);
    r.dispatch(gemmSource(in[0].desc.dtype, tile), push, r.groupsFor(uint64_t(pixels), uint64_t(tile.bn), 0),
               r.groupsFor(uint64_t(og), uint64_t(tile.bm), 1), r.groupsFor(uint64_t(units), 1, 2));
  }

  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs& attrs) const override {
    std::vector<TensorDesc> descs;
    for (const auto& v : in) descs.push_back(v.desc);
    ConvGeometry g = geometry(op, descs, attrs);
    if (out[0].desc.numel() == 0) return;
    if (usePointwiseProduct(g, descs[0].dtype, r.features(), in)) {
      recordPointwiseProduct(r, g, in, out[0]);
      return;
    }
    if (useChannelMajorProduct(g, descs[0].dtype, r.features(), in) && recordChannelMajorProduct(r, g, in, out[0])) {
      return;
    }
    if (useWinograd(g, descs[0].dtype, r.features()) && recordWinograd(r, g, in, out[0])) return;
    if (useGemm(g)) {
      recordGemm(r, g, in, out[0]);
      return;
    }
    const int64_t cg = g.in.c / g.groups, og = g.o / g.groups;
    const int64_t bpg = (og + kOutChannelsPerInvocation - 1) / kOutChannelsPerInvocation;
    const uint64_t items = uint64_t(g.in.n) * uint64_t(g.groups * bpg) * uint64_t(g.oh * g.ow);
    if (items == 0) return;
    auto meta = words({g.in.n, g.in.c, g.in.h, g.in.w, g.o, g.kh, g.kw, g.oh, g.ow, g.sh, g.sw, g.ph, g.pw, g.dh,
                       g.dw, g.groups, cg, og, bpg});
    ConvPush push{};
    push.y = out[0].buffer->deviceAddress();
    push.x = in[0].buffer->deviceAddress();
    push.w = in[1].buffer->deviceAddress();
    push.b = g.bias ? in[2].buffer->deviceAddress() : 0;
    push.meta = r.params(meta);
    push.items = uint32_t(items);
    push.hasBias = g.bias ? 1 : 0;
    r.dispatch(source(op, descs[0].dtype), push, r.groupsFor(items, 256));
  }

  std::vector<const KernelSource*> variants(const OpSpec& op, DType dtype) const override {
    std::vector<const KernelSource*> all = {&source(op, dtype)};
    for (bool inside : {false, true}) {
      if (inside && transposed_) continue;  // X_ALL_INSIDE is for convolutions, not transposed ones
      auto tile = [&](int bn, int bk, bool vec4) {
        GemmTile t{64, bn, bk, vec4};
        t.allInside = inside;
        return t;
      };
      for (int bn : {64, 128}) {
        for (bool v : {false, true}) all.push_back(&gemmSource(dtype, tile(bn, 8, v)));
      }
      all.push_back(&gemmSource(dtype, tile(64, 16, true)));
    }
    if (spatial_ == 2 && !transposed_ && (dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16)) {
      for (const char* mode : {"WG_INPUT", "WG_WEIGHT", "WG_OUTPUT"}) all.push_back(&winogradSource(mode, dtype));
    }
    if (dtype == DType::BF16) all.push_back(&gemmSource(dtype, kGemmCoopTapTile));
    if (dtype == DType::F16) {
      for (bool v : {false, true}) {
        GemmTile t = kGemmCoopTile;
        t.weightVec4 = v;
        all.push_back(&gemmSource(dtype, t));
      }
      all.push_back(&gemmSource(dtype, kGemmCoopTapTile));
    }
    return all;
  }

 private:
  int spatial_;
  bool transposed_;
  KernelVariants variants_;
};

// ---------------------------------------------------------------- pooling

struct PlanePush {
  uint64_t y, x, meta;
  uint32_t items, mode;
};

// PyTorch's pooling_output_shape.
int64_t pooledSize(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dilation, bool ceil) {
  int64_t num = in + 2 * pad - dilation * (k - 1) - 1 + (ceil ? stride - 1 : 0);
  int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
  if (ceil && (out - 1) * stride >= in + pad) --out;
  return out;
}

class Pool final : public KernelTemplate {
 public:
  Pool(PoolKind kind, int spatial) : kind_(kind), spatial_(spatial) {}

  PoolGeometry geometry(const OpSpec& op, const TensorDesc& in, const Attrs& attrs) const {
    const int s = spatial_;
    PoolGeometry g;
    g.in = planesOf(op, in, s, s == 2 ? "[N, C, H, W] or [C, H, W]" : "[N, C, L] or [C, L]");
    checkSpatialNonEmpty(op, in, g.in);
    std::vector<int64_t> size = s == 2 ? std::vector<int64_t>{g.in.h, g.in.w} : std::vector<int64_t>{g.in.w};
    std::vector<int64_t> out(static_cast<size_t>(s));
    if (kind_ == PoolKind::kAdaptiveAvg) {
      out = spatialAttr(op, attrs, "output_size", s, 1);
    } else {
      auto kernel = spatialAttr(op, attrs, "kernel_size", s, 1);
      auto stride = attrs.getInts("stride").empty() ? kernel : spatialAttr(op, attrs, "stride", s, 1);
      auto padding = spatialAttr(op, attrs, "padding", s, 0);
      auto dilation = kind_ == PoolKind::kMax ? spatialAttr(op, attrs, "dilation", s, 1) : std::vector<int64_t>(size_t(s), 1);
      bool ceil = attrs.getBool("ceil_mode");
      for (int d = 0; d < s; ++d) {
        if (padding[d] * 2 > kernel[d]) {
          throwInvalid(op.name + ": attribute 'padding' is " + listStr(padding) +
                       "; expected at most half the kernel size " + listStr(kernel));
        }
        out[d] = pooledSize(size[d], kernel[d], padding[d], stride[d], dilation[d], ceil);
      }
      for (int d = 0; d < s; ++d) {
        if (out[d] <= 0) {
          throwInvalid(op.name + ": the output size would be " + sizeStr(out) + " (input " + shapeStr(in.shape) +
                       ", kernel_size " + listStr(kernel) + ", stride " + listStr(stride) + ", padding " +
                       listStr(padding) + ", dilation " + listStr(dilation) + "); expected every output dim >= 1");
        }
      }
      if (s == 2) {
        g.kh = kernel[0], g.sh = stride[0], g.ph = padding[0], g.dh = dilation[0];
      }
      g.kw = kernel.back(), g.sw = stride.back(), g.pw = padding.back(), g.dw = dilation.back();
      if (kind_ == PoolKind::kAvg) {
        g.includePad = attrs.getBool("count_include_pad");
        if (attrs.has("divisor_override")) {
          g.divisor = attrs.getInt("divisor_override");
          if (g.divisor == 0) throwInvalid(op.name + ": attribute 'divisor_override' is 0; expected a non-zero divisor");
          if (g.divisor < 0) {
            throwInvalid(op.name + ": attribute 'divisor_override' is " + std::to_string(g.divisor) +
                         "; expected a positive divisor");
          }
        }
      }
    }
    if (s == 2) g.oh = out[0];
    g.ow = out.back();
    g.out = outShape(g.in, g.in.c, s, g.oh, g.ow);
    return g;
  }

  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const override {
    return {TensorDesc{in[0].dtype, geometry(op, in[0], attrs).out}};
  }

  const KernelSource& source(DType dtype) const {
    return variants_.get("pool|" + std::string(dtypeName(dtype)), [&] {
      GlslBuilder b(dtype);
      b.output("y", dtype).input("x", dtype);
      return b.build(kernelFile("pool.comp"));
    });
  }

  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs& attrs) const override {
    PoolGeometry g = geometry(op, in[0].desc, attrs);
    const uint64_t items = uint64_t(out[0].desc.numel());
    if (items == 0) return;
    auto meta = words({g.in.h, g.in.w, g.oh, g.ow, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw,
                       g.includePad ? 1 : 0, g.divisor});
    PlanePush push{};
    push.y = out[0].buffer->deviceAddress();
    push.x = in[0].buffer->deviceAddress();
    push.meta = r.params(meta);
    push.items = uint32_t(items);
    push.mode = kind_ == PoolKind::kMax ? 0 : kind_ == PoolKind::kAvg ? 1 : 2;
    r.dispatch(source(in[0].desc.dtype), push, r.groupsFor(items, 256));
  }

  std::vector<const KernelSource*> variants(const OpSpec&, DType dtype) const override { return {&source(dtype)}; }

 private:
  PoolKind kind_;
  int spatial_;
  KernelVariants variants_;
};

// ---------------------------------------------------------------- interpolate

class Interpolate final : public KernelTemplate {
 public:
  Resize resize(const OpSpec& op, const TensorDesc& in, const Attrs& attrs) const {
    if (in.rank() != 4) {
      throwInvalid(op.name + ": input 'input' has shape " + shapeStr(in.shape) +
                   "; expected [N, C, H, W] (rank 4), got rank " + std::to_string(in.rank()));
    }
    const int64_t h = in.shape[2], w = in.shape[3];
    if (h <= 0 || w <= 0) {
      throwInvalid(op.name + ": input 'input' has shape " + shapeStr(in.shape) + "; expected non-zero H and W");
    }
    Resize z;
    const std::string& mode = attrs.getText("mode");
    if (mode == "nearest") z.mode = 0;
    else if (mode == "nearest-exact") z.mode = 1;
    else if (mode == "bilinear") z.mode = 2;
    else {
      throwInvalid(op.name + ": attribute 'mode' is '" + mode + "'; expected 'nearest', 'nearest-exact' or 'bilinear'");
    }
    if (attrs.has("align_corners")) {
      if (z.mode != 2) {
        throwInvalid(op.name + ": attribute 'align_corners' is given with mode '" + mode +
                     "'; expected it only with mode 'bilinear'");
      }
      z.alignCorners = attrs.getBool("align_corners");
    }
    bool hasSize = attrs.has("size"), hasScale = attrs.has("scale_factor");
    if (hasSize == hasScale) {
      throwInvalid(op.name + ": " + std::string(hasSize ? "both 'size' and 'scale_factor' are given" : "neither 'size' nor 'scale_factor' is given") +
                   "; expected exactly one of them");
    }
    std::vector<double> factors;
    if (hasSize) {
      auto size = attrs.getInts("size");
      if (size.size() == 1) size.assign(2, size[0]);
      if (size.size() != 2) {
        throwInvalid(op.name + ": attribute 'size' is " + listStr(attrs.getInts("size")) + "; expected 1 or 2 ints");
      }
      z.oh = size[0], z.ow = size[1];
    } else {
      factors = attrs.getFloats("scale_factor");
      if (factors.size() == 1) factors.assign(2, factors[0]);
      if (factors.size() != 2) {
        throwInvalid(op.name + ": attribute 'scale_factor' has " + std::to_string(attrs.getFloats("scale_factor").size()) +
                     " values; expected 1 or 2 floats");
      }
      for (double f : factors) {
        if (!(f > 0) || !std::isfinite(f)) {
          throwInvalid(op.name + ": attribute 'scale_factor' holds " + std::to_string(f) + "; expected positive factors");
        }
      }
      z.oh = int64_t(std::floor(double(h) * factors[0]));
      z.ow = int64_t(std::floor(double(w) * factors[1]));
    }
    if (z.oh <= 0 || z.ow <= 0) {
      throwInvalid(op.name + ": the output size would be " + std::to_string(z.oh) + "x" + std::to_string(z.ow) +
                   " (input " + shapeStr(in.shape) + "); expected every output dim >= 1");
    }
    // PyTorch's area_pixel_compute_scale / compute_scales_value.
    auto scale = [&](int64_t inSize, int64_t outSize, size_t d) -> float {
      if (z.mode == 2 && z.alignCorners) return outSize > 1 ? float(inSize - 1) / float(outSize - 1) : 0.0f;
      if (!factors.empty()) return float(1.0 / factors[d]);
      return float(inSize) / float(outSize);
    };
    z.scaleH = scale(h, z.oh, 0);
    z.scaleW = scale(w, z.ow, 1);
    z.out = {in.shape[0], in.shape[1], z.oh, z.ow};
    return z;
  }

  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const override {
    return {TensorDesc{in[0].dtype, resize(op, in[0], attrs).out}};
  }

  const KernelSource& source(DType dtype) const {
    return variants_.get("interpolate|" + std::string(dtypeName(dtype)), [&] {
      GlslBuilder b(dtype);
      b.output("y", dtype).input("x", dtype);
      return b.build(std::string(kernelFile("resize_index.glsl")) + std::string(kernelFile("interpolate.comp")));
    });
  }

  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs& attrs) const override {
    Resize z = resize(op, in[0].desc, attrs);
    const uint64_t items = uint64_t(out[0].desc.numel());
    if (items == 0) return;
    std::vector<uint32_t> meta = words({in[0].desc.shape[2], in[0].desc.shape[3], z.oh, z.ow});
    meta.push_back(floatBits(z.scaleH));
    meta.push_back(floatBits(z.scaleW));
    meta.push_back(z.alignCorners ? 1 : 0);
    PlanePush push{};
    push.y = out[0].buffer->deviceAddress();
    push.x = in[0].buffer->deviceAddress();
    push.meta = r.params(meta);
    push.items = uint32_t(items);
    push.mode = uint32_t(z.mode);
    r.dispatch(source(in[0].desc.dtype), push, r.groupsFor(items, 256));
  }

  std::vector<const KernelSource*> variants(const OpSpec&, DType dtype) const override { return {&source(dtype)}; }

 private:
  KernelVariants variants_;
};

}  // namespace

std::shared_ptr<const KernelTemplate> conv(int spatial, bool transposed) {
  return std::make_shared<Conv>(spatial, transposed);
}

std::shared_ptr<const KernelTemplate> pool(PoolKind kind, int spatial) { return std::make_shared<Pool>(kind, spatial); }

std::shared_ptr<const KernelTemplate> interpolate() { return std::make_shared<Interpolate>(); }

ConvGeometry convGeometry(const OpSpec& op, int spatial, bool transposed, std::span<const TensorDesc> in,
                          const Attrs& attrs) {
  return Conv(spatial, transposed).geometry(op, in, attrs);
}

PoolGeometry poolGeometry(const OpSpec& op, PoolKind kind, int spatial, const TensorDesc& in, const Attrs& attrs) {
  return Pool(kind, spatial).geometry(op, in, attrs);
}

Resize resizeGeometry(const OpSpec& op, const TensorDesc& in, const Attrs& attrs) {
  return Interpolate().resize(op, in, attrs);
}

}  // namespace tensord::compute
