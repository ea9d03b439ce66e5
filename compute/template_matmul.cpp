// Matrix products (see template_matmul.h): every op kind maps its inputs to
// one strided batched product, y = alpha * (a @ b) + beta * c, generated per
// dtype from kernels/matmul.comp (with faster paths in matmul_fast.comp and,
// on devices with cooperative matrices, matmul_coop.comp: f16 and bf16, and
// f32 split into bf16 parts); dot uses kernels/matmul_dot.comp.

#include "compute/template_matmul.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>

#include "compute/error.h"
#include "compute/glsl.h"
#include "compute/op_spec.h"
#include "compute/spirv_coop.h"
#include "compute/template_util.h"

namespace tensord::compute {
namespace {

constexpr size_t kMaxBatchRank = 4;
constexpr int64_t kSmall = 16;  // M or N below this: one invocation per output element

// The strided batched product an op call maps to. Strides are in elements.
struct Plan {
  int64_t m = 0, n = 0, k = 0;
  Shape batch;                          // coalesced batch dims
  std::vector<std::vector<int64_t>> bs; // batch strides of a, b, c
  int64_t sam = 0, sak = 1, sbk = 0, sbn = 1, scm = 0, scn = 0;
  // b as [K, N] in scratch whose rows are padded with zeros to sbk, which
  // is a multiple of 8: slots of 8 past N may be loaded (dispatchPadded).
  bool bRowsPadded = false;
  bool bias = false;
  double alpha = 1, beta = 1;
  Shape out;
};

std::string q(const std::string& name) { return "'" + name + "'"; }

// Batch strides of a contiguous operand with batch dims `own` broadcast to
// `batch`, for matrices of `matrix` elements.
std::vector<int64_t> batchStrides(const Shape& own, const Shape& batch, int64_t matrix) {
  auto s = broadcastStrides(own, batch);
  for (auto& v : s) v *= matrix;
  return s;
}

// `small`: one invocation per output element, for products with M or N below a tile.
const KernelSource& matmulSource(DType dtype, bool small) {
  static KernelVariants variants;
  return variants.get("matmul|" + std::string(dtypeName(dtype)) + (small ? "|small" : "|tiled64"), [&] {
    GlslBuilder b(dtype);
    b.input("a", dtype).input("b", dtype).input("c", dtype).output("y", dtype);
    if (small) b.define("SMALL");
    return b.build(kernelFile("matmul.comp"));
  });
}

// Split-K's second pass: y = alpha * (sum of the partial products) + beta * c.
// The partial products are f32 (f16 and bf16 ones come from the tensor-core
// kernel's Y_F32 variant).
const KernelSource& splitSumSource(DType dtype) {
  static KernelVariants variants;
  return variants.get("matmul|" + std::string(dtypeName(dtype)) + "|splitsum", [&] {
    GlslBuilder b(dtype);
    b.input("a", DType::F32).input("b", dtype).input("c", dtype).output("y", dtype);
    b.define("SPLIT_SUM");
    return b.build(kernelFile("matmul.comp"));
  });
}

// An operand copied into scratch memory with its rows padded to a multiple
// of 8 elements (kernels/matmul_pad.comp).
const KernelSource& padSource(DType dtype) {
  static KernelVariants variants;
  return variants.get("matmul|" + std::string(dtypeName(dtype)) + "|pad", [&] {
    GlslBuilder b(dtype);
    b.input("x", dtype).output("y", dtype);
    b.define("ZERO", dtype == DType::F16 ? "float16_t(0.0)" : dtype == DType::BF16 ? "uint16_t(0u)" : "0.0");
    return b.build(kernelFile("matmul_pad.comp"));
  });
}

// The fast path (kernels/matmul_fast.comp): a float product whose a is a
// row-major [M, K] and whose b is [K, N] or, transposed, [N, K], each with
// unit stride along its rows, which may be longer than the product reads
// (split K's slices: a's row stride at least K, b's at least N or K).
struct FastConfig {
  int bm = 0, bn = 0;   // output tile
  bool transB = false;  // b is [N, K] (linear's weight)
  bool aligned = false; // vec4 loads and stores
  bool inner = false;   // every tile wholly inside the product (INNER_ONLY: no edge tiles to compile)
  bool shortK = false;  // 64x64 tiles in K steps of 8, for devices with less shared memory
};

// K step: 8 for 128-wide tiles (double-buffered 128x128 tiles then take
// 16.5 KiB of shared memory, and 16 costs registers: measured slower), 16 for
// 64x64 tiles (half the barriers), unless the device's shared memory holds
// only K steps of 8 (FastConfig::shortK).
constexpr int kFastBK = 8, kFastBK64 = 16;
int fastBK(const FastConfig& f) { return f.bm == 64 && f.bn == 64 && !f.shortK ? kFastBK64 : kFastBK; }

// Shared memory of a configuration: two buffers of a K step of both tiles,
// in vec4s with one of padding per row (matmul_fast.comp's As and Bs).
uint32_t fastSharedBytes(const FastConfig& f) { return uint32_t(2 * fastBK(f) * (f.bm / 4 + 1 + f.bn / 4 + 1) * 16); }

const KernelSource& fastSource(DType dtype, const FastConfig& f) {
  static KernelVariants variants;
  std::string key = "matmul|" + std::string(dtypeName(dtype)) + "|fast" + std::to_string(f.bm) + "x" +
                    std::to_string(f.bn) + (f.transB ? "|bt" : "|bn") + (f.aligned ? "|v4" : "|v1") +
                    (f.inner ? "|in" : "") + (f.shortK ? "|k8" : "");
  return variants.get(key, [&] {
    GlslBuilder b(dtype);
    b.input("a", dtype).input("b", dtype).input("c", dtype).output("y", dtype);
    b.define("BM", std::to_string(f.bm) + "u").define("BN", std::to_string(f.bn) + "u");
    b.define("BK", std::to_string(fastBK(f)) + "u");
    if (f.transB) b.define("TRANS_B");
    if (f.aligned) b.define("ALIGNED");
    if (f.inner) b.define("INNER_ONLY");
    return b.build(kernelFile("matmul_fast.comp"));
  });
}

std::vector<FastConfig> allFastConfigs() {
  std::vector<FastConfig> all;
  for (int bm : {64, 128}) {
    for (int bn : {64, 128}) {
      for (bool transB : {false, true}) {
        for (bool aligned : {false, true}) {
          for (bool inner : {false, true}) {
            all.push_back({bm, bn, transB, aligned, inner});
            if (bm == 64 && bn == 64) all.push_back({bm, bn, transB, aligned, inner, true});
          }
        }
      }
    }
  }
  return all;
}

// The tensor-core path (kernels/matmul_coop.comp): f16 and bf16 products on
// devices with cooperative matrices, and f32 ones split into bf16 parts
// (F32_SPLIT); operands as for the fast path. It moves them 16 bytes at a
// time where K and N are multiples of 8 and a, b and y 16-byte aligned;
// others are padded (dispatchPadded) or moved one element at a time
// (unalignedA, B, Y).
struct CoopConfig {
  int bm = 0, bn = 0, bk = 0;  // output tile and K step
  int wm = 0, wn = 0;          // each subgroup's outputs: (bm / wm) x (bn / wn) subgroups of 32
  int group = 8;               // tile rows per band of the tile order (L2 reuse)
  bool single = false;         // one shared buffer (two barriers per K step) instead of two
  bool transB = false;
  // Operands whose elements are loaded or stored one at a time (A_UNALIGNED,
  // B_UNALIGNED, Y_UNALIGNED): rows not 16-byte aligned, or of a length
  // that is not a multiple of 8.
  bool unalignedA = false, unalignedB = false, unalignedY = false;
};

// dtype F16 or BF16: bf16 operands move as f16 ones do, and the kernel cache
// makes them bf16 in the SPIR-V (spirv_coop.h, kBf16OperandsDefine).
// `yF32`: the products are stored as f32 (Y_F32), not in `dtype`.
const KernelSource& coopSource(DType dtype, const CoopConfig& c, bool yF32 = false) {
  static KernelVariants variants;
  yF32 = yF32 && dtype != DType::F32;  // f32 products are always stored as f32: one variant
  std::string key = "matmul|" + std::string(dtypeName(dtype)) + "|coop" + std::to_string(c.bm) + "x" +
                    std::to_string(c.bn) + "x" + std::to_string(c.bk) + "|w" + std::to_string(c.wm) + "x" +
                    std::to_string(c.wn) + "|g" + std::to_string(c.group) + (c.single ? "|s1" : "|s2") +
                    (c.transB ? "|bt" : "|bn") + (c.unalignedA || c.unalignedB || c.unalignedY ? "|u" : "") +
                    (c.unalignedA ? "a" : "") + (c.unalignedB ? "b" : "") + (c.unalignedY ? "y" : "") +
                    (yF32 ? "|y32" : "");
  return variants.get(key, [&] {
    GlslBuilder b(dtype);
    b.input("a", dtype).input("b", dtype).input("c", dtype).output("y", yF32 ? DType::F32 : dtype);
    if (yF32 || dtype == DType::F32) b.define("Y_F32");
    if (dtype == DType::F32) b.define("F32_SPLIT");
    if (dtype == DType::BF16 || dtype == DType::F32) b.define(std::string(kBf16OperandsDefine));
    b.define("BM", std::to_string(c.bm) + "u").define("BN", std::to_string(c.bn) + "u");
    b.define("BK", std::to_string(c.bk) + "u");
    b.define("WM", std::to_string(c.wm) + "u").define("WN", std::to_string(c.wn) + "u");
    b.define("GROUP_M", std::to_string(c.group) + "u");
    b.define("NT", std::to_string((c.bm / c.wm) * (c.bn / c.wn) * 32) + "u");
    if (c.single) b.define("SINGLE_BUF");
    if (c.transB) b.define("TRANS_B");
    if (c.unalignedA) b.define("A_UNALIGNED");
    if (c.unalignedB) b.define("B_UNALIGNED");
    if (c.unalignedY) b.define("Y_UNALIGNED");
    if (dtype == DType::F32) {
      return b.build(std::string(kernelFile("split_bf16.glsl")) + std::string(kernelFile("matmul_coop.comp")));
    }
    return b.build(kernelFile("matmul_coop.comp"));
  });
}

// b as [K, N]: 128x128 output tiles in K steps of 32, 4 subgroups of 64x64
// outputs (4x4 fragments), double-buffered in 37 KiB of shared memory.
// Measured on an H100 through VK_KHR_cooperative_matrix (2026-11-25,
// `op_bench --no-client --repeats 10`, two rounds alternately in one
// lease), TFLOP/s at f16 4096 / 8192, bf16 8192: 294-298 / 302-305 /
// 305-308, against 262 / 275-277 / 275 for 4 subgroups of 32x128 before
// a's shared stores were spread over the banks (matmul_coop.comp,
// tileRow), and 263-265 / 285-287 / 283-287 for 32x128 after: with the
// stores no longer conflicting, the smaller subgroup tiles' fewer fragment
// loads from shared memory pay. Bands of 4 or 16 tile rows ran the same as
// 8. 128x256 and 256x128 tiles of 64x64 subgroups in one buffer (27 and
// 29 KiB) 266 / 252 at 8192, double-buffered past the 48 KiB limit (54
// and 57 KiB, which the driver accepted) 293-302 against 304 in that
// lease; K steps of 64 in one buffer 280. Before the
// bank spread, at 8192: 32x128 276, 64x64 271, 128x32 251, 128x256 tiles
// in one buffer 247, K steps of 64 in one buffer 224, K steps of 16
// 192-197; through the NV extension every shape came within 2% of 182 (8
// subgroups of 64x32 or 32x64 184). b copied into shared memory
// transposed, so that its fragments load column-major as linear's do, ran
// at 90.
constexpr CoopConfig kCoopTile{128, 128, 32, 64, 64, 8, false, false};
// b as [N, K] (linear's weight): rows of both operands are contiguous along
// K, so a K step of 64 (128-byte row segments) pays for the second barrier
// of a single 36 KiB buffer; 4 subgroups of 64x64. 8% over the NV
// extension's best b-as-[K, N] tile; through the KHR extension 246 TFLOP/s
// (8192x4096 by 4096x4096), and K steps of 32 double-buffered 237; with
// the rows' shared stores spread over the banks as for kCoopTile, 251-258
// against 281-295 for this tile (2026-11-25).
constexpr CoopConfig kCoopTileTransB{128, 128, 64, 64, 64, 8, true, true};

// b as [K, N] with at most 64 rows and many columns (the GEMM of a
// 64-channel convolution, 1x1 convolutions to 64 channels): 64x256 tiles,
// 4 subgroups of 32x128, where 128-row tiles would be half empty. There are
// half as many of them, so only where they still fill the GPU (at least
// kShortTileMin with the batch). On the H100 (2026-11-23, `op_bench
// --repeats 10`, two rounds): 64x576 by 576x100352 96.0-97.2 TFLOP/s
// against 80.2-85.3, the f16 1x1 conv 256->64 channels 69.0-70.4 against
// 49.9; 64x128 tiles 86-93 and 56-60, 64x256 in K steps of 64 in one
// buffer 77-79 and 59-60. For linear on 64 rows of 4096 (16 tiles) they
// ran at 13.6 against 20.1-20.4 TFLOP/s: too few tiles.
constexpr CoopConfig kCoopTileShort{64, 256, 32, 32, 128, 8, false, false};
constexpr int64_t kShortTileMin = 256;

std::vector<CoopConfig> allCoopConfigs() { return {kCoopTile, kCoopTileTransB, kCoopTileShort}; }

// A configuration's variants for operands that are not aligned as its
// tiles need (K, or N of b as [K, N] and of y, not a multiple of 8, or an
// address or row stride not 16-byte aligned): the same tiles, the elements
// of those operands loaded or stored one at a time. For f32 (F32_SPLIT) any
// of a, b and y; for f16 and bf16 only y: their operands loaded one element
// at a time ran slower than the FMA kernel (H100, f16 4095: 26 against 38
// TFLOP/s), while an output layer over a vocabulary of 50257 (only y
// unaligned) went from 31 to 119. All of them, for the kernel check.
std::vector<CoopConfig> unalignedOf(const CoopConfig& c, DType dtype) {
  std::vector<CoopConfig> all;
  for (int bits = 1; bits < 8; ++bits) {
    CoopConfig u = c;
    u.unalignedA = bits & 1, u.unalignedB = bits & 2, u.unalignedY = bits & 4;
    if (dtype == DType::F32 || !(u.unalignedA || u.unalignedB)) all.push_back(u);
  }
  return all;
}

// f32 on bf16 tensor cores (F32_SPLIT, DeviceFeatures::f32SplitBf16): each
// tile is held as three bf16 planes, so 64x128 tiles in K steps of 32 fill
// one buffer of 38.5 KiB (39 with b as [N, K]); 4 subgroups of 32x64. On an
// H100 (2026-11-24, `op_bench --no-client --repeats 10`, TFLOP/s at 4096 /
// 8192 / linear 8192x4096x4096) against the FMA kernel's 45.8 / 46.6 / 46.1:
// these tiles 55.3-55.7 / 59.1-59.6 / 58.5-59.0. Measured before each K
// step's sum went through f32 arithmetic (matmul_coop.comp, MMA_TILE), as
// 60.5 / 61.9 / 59.7: 128x64 in the same buffer 59.7 / 60.7 / 59.5; 64x128
// with 4 subgroups of 64x32 52.2 / 54.3 / 54.8; 128x128 in K steps of 16 in
// one buffer (8 subgroups) 56.8 / 58.2 / 54.7; 64x128 in K steps of 16
// double-buffered 55.2 / 57.2. The split costs each element a dozen integer
// operations; a first version with three more (a sign kept apart, an
// overflow clamp) ran the double-buffered tiles at 47.7 / 49.7.
constexpr CoopConfig kSplitTile{64, 128, 32, 32, 64, 8, true, false};
constexpr CoopConfig kSplitTileTransB{64, 128, 32, 32, 64, 8, true, true};
// The f32 recomputation of a tile with special values (matmul_coop.comp,
// productIeee) gives each invocation one column and a multiple of 4 rows.
constexpr bool recomputeFits(const CoopConfig& c) {
  const int threads = (c.bm / c.wm) * (c.bn / c.wn) * 32;
  return threads % c.bn == 0 && (c.bm / (threads / c.bn)) % 4 == 0;
}
static_assert(recomputeFits(kSplitTile) && recomputeFits(kSplitTileTransB));
// Below this K the split's fixed costs lose to the FMA kernel (bmm
// 32x512x64x512: 25.7 against 28.2 TFLOP/s).
constexpr int64_t kSplitMinK = 256;
std::vector<CoopConfig> allSplitConfigs() {
  std::vector<CoopConfig> all = {kSplitTile, kSplitTileTransB};
  for (const CoopConfig& c : {kSplitTile, kSplitTileTransB}) {
    for (const CoopConfig& u : unalignedOf(c, DType::F32)) all.push_back(u);
  }
  return all;
}

DType dotAccumulator(DType dtype) { return isFloating(dtype) ? DType::F32 : dtype; }

const KernelSource& dotSource(DType dtype, int pass) {
  static KernelVariants variants;
  return variants.get("dot|" + std::string(dtypeName(dtype)) + "|" + std::to_string(pass), [&] {
    GlslBuilder b(dtype);
    b.input("a", dtype).input("b", dtype);
    if (pass == 1) b.output("part", dotAccumulator(dtype));
    else b.input("part", dotAccumulator(dtype));
    b.output("y", dtype);
    b.define("PASS", std::to_string(pass));
    return b.build(kernelFile("matmul_dot.comp"));
  });
}

class Matmul final : public KernelTemplate {
 public:
  explicit Matmul(MatmulKind kind) : kind_(kind) {}

  uint64_t flops(const OpSpec& op, std::span<const TensorView> inputs, std::span<const TensorView> outputs,
                 const Attrs& attrs) const override {
    std::vector<TensorDesc> in;
    for (const auto& v : inputs) in.push_back(v.desc);
    return 2 * uint64_t(outputs[0].desc.numel()) * uint64_t(plan(op, in, attrs).k);
  }

  Plan plan(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const {
    const std::string& name = op.name;
    auto needRank = [&](size_t i, size_t rank) {
      if (in[i].rank() != rank) {
        throwInvalid(name + ": input " + q(op.inputName(i)) + " is " + in[i].str() + "; expected a " +
                     std::to_string(rank) + "-D tensor");
      }
    };
    // Inner dims: a's last dim (k) must equal b's dim `bk` of index `bkDim`.
    auto checkInner = [&](size_t ia, size_t ib, int64_t k, int64_t bk, int64_t bkDim) {
      if (bk != k) {
        throwInvalid(name + ": input " + q(op.inputName(ib)) + " has shape " + shapeStr(in[ib].shape) +
                     "; expected dim " + std::to_string(bkDim) + " to be " + std::to_string(k) + " (the last dim of " +
                     q(op.inputName(ia)) + " " + shapeStr(in[ia].shape) + ")");
      }
    };
    Plan p;
    size_t ia = 0, ib = 1;
    if (kind_ == MatmulKind::kAddmm || kind_ == MatmulKind::kBaddbmm) ia = 1, ib = 2;
    const TensorDesc& a = in[ia];
    switch (kind_) {
      case MatmulKind::kMatmul: {
        const TensorDesc& b = in[ib];
        for (size_t i : {ia, ib}) {
          if (in[i].rank() == 0) {
            throwInvalid(name + ": input " + q(op.inputName(i)) + " is 0-d; matmul needs at least 1 dim on both inputs");
          }
        }
        Shape as = a.shape, bs = b.shape;
        bool dropM = as.size() == 1, dropN = bs.size() == 1;
        if (dropM) as.insert(as.begin(), 1);
        if (dropN) bs.push_back(1);
        p.m = as[as.size() - 2];
        p.k = as.back();
        p.n = bs.back();
        checkInner(ia, ib, p.k, bs[bs.size() - 2], b.rank() == 1 ? 0 : int64_t(b.rank()) - 2);
        Shape aBatch(as.begin(), as.end() - 2), bBatch(bs.begin(), bs.end() - 2);
        auto batch = broadcastShapes(aBatch, bBatch);
        if (!batch) {
          throwInvalid(name + ": batch dims of " + q(op.inputName(ia)) + " " + shapeStr(aBatch) + " and " +
                       q(op.inputName(ib)) + " " + shapeStr(bBatch) + " cannot be broadcast together");
        }
        p.out = *batch;
        if (!dropM) p.out.push_back(p.m);
        if (!dropN) p.out.push_back(p.n);
        p.batch = *batch;
        p.bs = {batchStrides(aBatch, *batch, p.m * p.k), batchStrides(bBatch, *batch, p.k * p.n),
                std::vector<int64_t>(batch->size(), 0)};
        break;
      }
      case MatmulKind::kMm:
      case MatmulKind::kAddmm: {
        needRank(ia, 2);
        needRank(ib, 2);
        p.m = a.shape[0], p.k = a.shape[1], p.n = in[ib].shape[1];
        checkInner(ia, ib, p.k, in[ib].shape[0], 0);
        p.out = {p.m, p.n};
        break;
      }
      case MatmulKind::kBmm:
      case MatmulKind::kBaddbmm: {
        needRank(ia, 3);
        needRank(ib, 3);
        const TensorDesc& b = in[ib];
        if (a.shape[0] != b.shape[0]) {
          throwInvalid(name + ": input " + q(op.inputName(ib)) + " has shape " + shapeStr(b.shape) +
                       "; expected dim 0 to be " + std::to_string(a.shape[0]) + " (the batch size of " +
                       q(op.inputName(ia)) + " " + shapeStr(a.shape) + ")");
        }
        p.m = a.shape[1], p.k = a.shape[2], p.n = b.shape[2];
        checkInner(ia, ib, p.k, b.shape[1], 1);
        p.out = {a.shape[0], p.m, p.n};
        p.batch = {a.shape[0]};
        p.bs = {{p.m * p.k}, {p.k * p.n}, {0}};
        break;
      }
      case MatmulKind::kOuter: {
        needRank(0, 1);
        needRank(1, 1);
        p.m = a.shape[0], p.k = 1, p.n = in[1].shape[0];
        p.out = {p.m, p.n};
        p.sam = 1, p.sak = 0, p.sbk = 0, p.sbn = 1;
        break;
      }
      case MatmulKind::kLinear: {
        const TensorDesc& w = in[1];
        if (a.rank() == 0) throwInvalid(name + ": input 'input' is 0-d; expected at least 1 dim ([..., in_features])");
        needRank(1, 2);
        p.k = a.shape.back();
        p.n = w.shape[0];
        if (w.shape[1] != p.k) {
          throwInvalid(name + ": input 'weight' has shape " + shapeStr(w.shape) + "; expected dim 1 to be " +
                       std::to_string(p.k) + " (the last dim of 'input' " + shapeStr(a.shape) + ")");
        }
        p.m = 1;
        for (size_t d = 0; d + 1 < a.rank(); ++d) p.m *= a.shape[d];
        p.out.assign(a.shape.begin(), a.shape.end() - 1);
        p.out.push_back(p.n);
        p.sam = p.k, p.sak = 1, p.sbk = 1, p.sbn = p.k;  // weight read transposed in place
        if (in.size() > 2) {
          const TensorDesc& bias = in[2];
          if (bias.rank() > 1 || (bias.rank() == 1 && bias.shape[0] != p.n && bias.shape[0] != 1)) {
            throwInvalid(name + ": input 'bias' has shape " + shapeStr(bias.shape) + "; expected [" +
                         std::to_string(p.n) + "] (out_features, weight's dim 0)");
          }
          p.bias = true;
          p.scm = 0;
          p.scn = bias.numel() > 1 ? 1 : 0;
        }
        break;
      }
    }
    if (kind_ != MatmulKind::kOuter && kind_ != MatmulKind::kLinear) {
      p.sam = p.k, p.sak = 1, p.sbk = p.n, p.sbn = 1;
    }
    if (kind_ == MatmulKind::kAddmm || kind_ == MatmulKind::kBaddbmm) {
      const TensorDesc& c = in[0];
      if (!broadcastShapes(c.shape, p.out) || *broadcastShapes(c.shape, p.out) != p.out) {
        throwInvalid(name + ": input 'input' has shape " + shapeStr(c.shape) + "; expected a shape that broadcasts to " +
                     shapeStr(p.out) + " (the product's shape)");
      }
      auto s = broadcastStrides(c.shape, p.out);
      p.scm = s[s.size() - 2], p.scn = s.back();
      if (kind_ == MatmulKind::kBaddbmm) p.bs[2] = {s[0]};
      p.alpha = attrs.getNumber("alpha");
      p.beta = attrs.getNumber("beta");
      p.bias = p.beta != 0;  // PyTorch: beta = 0 ignores input (NaN and inf included)
    }
    if (!p.batch.empty()) {
      Coalesced c = coalesce(p.batch, p.bs);
      p.batch = c.shape;
      p.bs = c.strides;
    }
    if (p.batch.size() > kMaxBatchRank) {
      throwInvalid(name + ": the batch dims " + shapeStr(Shape(p.out.begin(), p.out.end() - 2)) + " leave " +
                   std::to_string(p.batch.size()) + " independent dims after broadcasting; at most " +
                   std::to_string(kMaxBatchRank) + " are supported");
    }
    return p;
  }

  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const override {
    Plan p = plan(op, in, attrs);
    return {TensorDesc{in[0].dtype, p.out}};
  }

  std::vector<const KernelSource*> variants(const OpSpec&, DType dtype) const override {
    std::vector<const KernelSource*> all = {&matmulSource(dtype, false), &matmulSource(dtype, true)};
    if (isFloating(dtype)) {
      for (const auto& f : allFastConfigs()) all.push_back(&fastSource(dtype, f));
    }
    if (dtype == DType::F32) {
      all.push_back(&splitSumSource(dtype));
      all.push_back(&padSource(dtype));
      for (const auto& c : allSplitConfigs()) all.push_back(&coopSource(dtype, c));
    }
    if (dtype == DType::F16 || dtype == DType::BF16) {
      all.push_back(&padSource(dtype));
      for (const auto& c : allCoopConfigs()) {
        all.push_back(&coopSource(dtype, c));
        all.push_back(&coopSource(dtype, c, true));
        for (const CoopConfig& u : unalignedOf(c, dtype)) all.push_back(&coopSource(dtype, u));
      }
      all.push_back(&splitSumSource(dtype));
    }
    return all;
  }

  // The tensor-core kernel's configuration for this product, or nullopt if
  // the device or the operands do not allow it. With `anyAlignment`,
  // operands the tiles' 16-byte moves do not fit are flagged
  // (CoopConfig::unalignedA, B, Y) rather than refused, and dispatchProduct
  // decides what to do with them; the other callers take only aligned
  // operands (splitK: unaligned f16 and bf16 products are padded, not
  // split).
  static std::optional<CoopConfig> coopConfig(const Plan& p, DType dtype, const DeviceFeatures* features,
                                              std::initializer_list<uint64_t> addresses, bool anyAlignment = false) {
    const bool split = dtype == DType::F32;  // on bf16 tensor cores (F32_SPLIT)
    if (!features || !(dtype == DType::F16    ? features->coopMatrixF16
                       : dtype == DType::BF16 ? features->coopMatrixBf16
                                              : split && features->f32SplitBf16)) {
      return std::nullopt;
    }
    if (split && p.k < kSplitMinK) return std::nullopt;
    // f32 moves as 4-element vectors, so N (b's rows as [K, N], y's rows)
    // need only be a multiple of 4 there; a's rows and b's as [N, K] go in
    // whole slots of 8 elements.
    const int64_t nAlign = split ? 4 : 8;
    if (p.m < 64 || p.n < 64 || p.k < 8) return std::nullopt;
    // Rows may be longer than the product reads (split-K's slices).
    if (p.sak != 1 || p.sam < p.k) return std::nullopt;
    // Each operand is aligned where its rows are 16-byte aligned and whole
    // slots of 8 elements (4 for f32's b as [K, N] and y).
    const uint64_t* address = addresses.begin();
    auto at16 = [&](size_t i) { return addresses.size() <= i || address[i] % 16 == 0; };
    CoopConfig c;
    bool alignedB = at16(1);
    if (p.sbn == 1 && p.sbk >= p.n) {
      int64_t batch = 1;
      for (int64_t d : p.batch) batch *= d;
      const bool shortTile =
          p.m <= kCoopTileShort.bm && batch * ((p.n + kCoopTileShort.bn - 1) / kCoopTileShort.bn) >= kShortTileMin;
      c = split ? kSplitTile : shortTile ? kCoopTileShort : kCoopTile;
      alignedB = alignedB && (p.n % nAlign == 0 || p.bRowsPadded) && p.sbk % nAlign == 0;
    } else if (p.sbk == 1 && p.sbn >= p.k) {
      c = split ? kSplitTileTransB : kCoopTileTransB;
      alignedB = alignedB && p.k % 8 == 0 && p.sbn % 8 == 0;
    } else {
      return std::nullopt;
    }
    c.unalignedA = !(at16(0) && p.k % 8 == 0 && p.sam % 8 == 0);
    c.unalignedB = !alignedB;
    c.unalignedY = !(at16(2) && p.n % nAlign == 0);
    if ((c.unalignedA || c.unalignedB || c.unalignedY) && !anyAlignment) return std::nullopt;
    return c;
  }

  // Output tiles that fill the GPU: 192 on an H100 (132 SMs), about 1.45
  // per compute unit where the device reports its count (at least 8), else
  // the H100's.
  static int64_t enoughTiles(const DeviceFeatures* features) {
    constexpr int64_t kH100Tiles = 192, kH100Units = 132;
    if (!features || features->computeUnits == 0) return kH100Tiles;
    return std::max<int64_t>(8, int64_t(features->computeUnits) * kH100Tiles / kH100Units);
  }

  // The fast kernel's configuration for this product, or nullopt if it does
  // not apply (integer dtypes, a small M or N, operands without unit
  // stride along their rows or with rows shorter than the product's).
  static std::optional<FastConfig> fastConfig(const Plan& p, int64_t batch, DType dtype,
                                              std::initializer_list<uint64_t> addresses,
                                              const DeviceFeatures* features) {
    if (!isFloating(dtype) || p.m < 64 || p.n < 64 || p.k < 1) return std::nullopt;
    // Rows may be longer than the product reads (split-K's slices).
    if (p.sak != 1 || p.sam < p.k) return std::nullopt;
    FastConfig f;
    if (p.sbn == 1 && p.sbk >= p.n) f.transB = false;
    else if (p.sbk == 1 && p.sbn >= p.k) f.transB = true;
    else return std::nullopt;
    // 128-wide tiles halve the loads per product over 64-wide ones, but only
    // pay off with enough workgroups to fill a large GPU.
    auto tiles = [&](int bm, int bn) { return batch * ((p.m + bm - 1) / bm) * ((p.n + bn - 1) / bn); };
    const int64_t enough = enoughTiles(features);
    f.bm = p.m >= 128 ? 128 : 64;
    f.bn = p.n >= 128 ? 128 : 64;
    if (f.bm == 128 && f.bn == 128 && tiles(128, 128) < enough) f.bm = 64;
    if (tiles(f.bm, f.bn) < enough) f.bm = 64, f.bn = 64;
    // The tiles the device's shared memory holds (at least 16 KiB: 64x64
    // tiles in K steps of 8 take 8.5 KiB; without `features`, any).
    const uint32_t shared = features ? features->sharedMemoryBytes : UINT32_MAX;
    if (fastSharedBytes(f) > shared) f.bm = 64, f.bn = 64;
    if (fastSharedBytes(f) > shared) f.shortK = true;
    if (fastSharedBytes(f) > shared) return std::nullopt;
    int64_t vector = 4;  // elements per vector load
    int64_t vectorBytes = vector * int64_t(dtypeSize(dtype));
    // Every row of a and b, in every batch entry, starts on a whole vector.
    f.aligned =
        p.k % vector == 0 && p.n % vector == 0 && p.sam % vector == 0 && (f.transB ? p.sbn : p.sbk) % vector == 0;
    for (size_t operand = 0; operand < 2 && operand < p.bs.size(); ++operand) {
      for (int64_t stride : p.bs[operand]) f.aligned = f.aligned && stride % vector == 0;
    }
    for (uint64_t address : addresses) f.aligned = f.aligned && address % uint64_t(vectorBytes) == 0;
    // Without edge tiles the kernel need not carry their copy of the K loop:
    // 1-3% faster on an H100 (8192 and 4096 products, linear 8192x4096x4096).
    f.inner = p.m % f.bm == 0 && p.n % f.bn == 0 && p.k % fastBK(f) == 0;
    return f;
  }

  // How many K slices a product is split into (1: not split). Split-K pays
  // when the output has too few tiles to fill the GPU but K is long (a
  // weight gradient [out, batch] @ [batch, in], say): each slice's product
  // goes to scratch memory as f32, and a second pass sums them, so the
  // partial products lose nothing. f32 slices run on the fast kernel where
  // M and N are at least 64 (else on the generic kernels), or on tensor cores
  // where dispatchProduct takes them there (the estimate below counts the
  // fast kernel's tiles and rate all the same); f16 and bf16
  // ones only on tensor cores (`features`, `addresses`:
  // whether the product takes them), each starting on a multiple of 64
  // elements of K so its operands stay 16-byte aligned.
  //
  // The count minimizes an estimate of the time, in units of the product's
  // on a full GPU: stretched by enoughTiles() / (tiles * slices) where fewer
  // tiles than that run, plus the partial products' trip through memory (8
  // bytes per output and slice), which costs 4 * slices * R / K of it for a
  // kernel that does R FLOPs in the time memory moves a byte. A split is
  // taken only where it promises at least 30% less. For f32 the tiles
  // counted are 128 wide, the fast kernel's best: unsplit, a product of
  // fewer than enoughTiles() of them runs on 64-wide tiles (or leaves SMs
  // idle), so the fill term stands for both. On an H100 (2026-11-24,
  // op_bench, M x K x N, two rounds), against the products unsplit unless
  // said otherwise:
  //   f32 256x65536x256 (64 slices) 39.4-39.8 TFLOP/s vs 20.5 (32 slices on
  //   the generic kernel), 512x32768x512 (16) 41.2-41.7 vs 7.6,
  //   1024x16384x1024 (4) 44.4-44.8 vs 27.4, 1024^3 (4) 30.5-34.0 vs
  //   27.6-29.0, 1024x4096x2048 (2) 40.7-42.0 vs 34.7-35.2,
  //   1024x2048x1536 (2) 30.1-31.4 vs 25.6-26.5;
  //   f16 512x32768x512 (16) 182-185 vs 21, 1024x16384x1024 (4) 229-232
  //   vs 86-92, linear 64x4096x4096 (4 or 8) 53-60 vs 21.
  // Splits that lost and are not taken: f16 1024^3 in 2 or 4 (52-82 vs
  // 76-81), 1536x2048x1536 in 2 (100-103 vs 128-131).
  static int64_t splitK(const Plan& p, int64_t batch, DType dtype, const DeviceFeatures* features,
                        std::initializer_list<uint64_t> addresses) {
    if (batch != 1 || p.k < 1024) return 1;
    int64_t bm = 0, bn = 0, align = 1;
    double flopsPerByte = 0;  // the kernel's FLOP rate over memory bandwidth, on an H100
    if (dtype == DType::F32) {
      bm = p.m >= 128 ? 128 : 64, bn = p.n >= 128 ? 128 : 64;
      flopsPerByte = 18;  // 45 TFLOP/s, 2.5 TB/s
    } else if (auto c = coopConfig(p, dtype, features, addresses)) {
      bm = c->bm, bn = c->bn, align = 64;
      flopsPerByte = 100;  // 250 TFLOP/s, 2.5 TB/s
    } else {
      return 1;
    }
    const double tiles = double(((p.m + bm - 1) / bm) * ((p.n + bn - 1) / bn));
    auto cost = [&](int64_t s) {
      const double fill = std::max(1.0, double(enoughTiles(features)) / (tiles * double(s)));
      return fill + (s > 1 ? 4 * flopsPerByte * double(s) / double(p.k) : 0.0);
    };
    int64_t best = 1;
    for (int64_t s = 2; s <= std::min<int64_t>(p.k / 256, 64); ++s) {  // slices of at least 256
      const bool fits = p.k % s == 0 && (p.k / s) % align == 0 && uint64_t(s * p.m * p.n) * 4 <= (64ull << 20);
      if (fits && cost(s) < cost(best)) best = s;
    }
    return cost(best) < 0.7 * cost(1) ? best : 1;
  }

  static std::vector<uint32_t> metaOf(const Plan& p, int64_t batch) {
    auto bits = [](double v) {
      float f = float(v);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      return u;
    };
    std::vector<uint32_t> meta = {uint32_t(p.m),   uint32_t(p.n),   uint32_t(p.k),   uint32_t(batch),
                                  uint32_t(p.batch.size()), p.bias ? 1u : 0u, bits(p.alpha), bits(p.beta),
                                  uint32_t(p.sam), uint32_t(p.sak), uint32_t(p.sbk), uint32_t(p.sbn),
                                  uint32_t(p.scm), uint32_t(p.scn)};
    meta.resize(14 + 4 * kMaxBatchRank, 0);
    for (size_t d = 0; d < p.batch.size(); ++d) {
      meta[14 + d] = uint32_t(p.batch[d]);
      for (size_t k = 0; k < 3; ++k) meta[18 + 4 * k + d] = uint32_t(p.bs[k][d]);
    }
    return meta;
  }

  struct Push {
    uint64_t a, b, c, y, meta;
  };

  // Whether a product whose a or b is unaligned gains from the tensor cores:
  // their copies (or loads one element at a time) and tiles 4 or 2 times the
  // FMA kernel's 64x64 leave small products slower. On an H100 (`op_bench
  // --no-client`, n^3, TFLOP/s, FMA kernel against tensor cores): f16 255
  // 1.9 / 1.1, 383 4.5 / 3.4, 511 8.7 / 7.4, 767 12.9 / 22.1, 1023 23.7 /
  // 42.6; f32 511 8.6 / 5.3, 1023 23.6 / 26.8.
  static bool unalignedPays(const Plan& p, int64_t batch, DType dtype) {
    const double flops = 2.0 * double(p.m) * double(p.n) * double(p.k) * double(batch);
    return flops >= (dtype == DType::F32 ? 0x1p30 : 0x1p29);
  }

  // A product on tensor cores whose a or b the kernel cannot load 16 bytes
  // at a time (K, or N of b as [K, N], not a multiple of 8; rows or
  // addresses not 16-byte aligned): those operands are first copied into
  // scratch memory with their rows padded with zeros to a multiple of 8
  // (K padded for both where K is not one), and the product runs on the
  // copies as an aligned one; y, if unaligned, is stored one element at a
  // time. On an H100 (4095^3, TFLOP/s): f16 178 against 38 on the FMA
  // kernel, f32 51 against 37 (and 43 with a and b loaded one element at a
  // time). Batches are copied matrix by matrix (a broadcast operand once per
  // matrix of the product). Only where the scratch is to be had; returns
  // whether it recorded the product.
  static bool dispatchPadded(Recorder& r, const Plan& p, int64_t batch, DType dtype, const Push& push) {
    const auto c = coopConfig(p, dtype, r.features(), {push.a, push.b, push.y}, true);
    if (!c || !(c->unalignedA || c->unalignedB) || !unalignedPays(p, batch, dtype)) return false;
    const int64_t kp = (p.k + 7) / 8 * 8, np = (p.n + 7) / 8 * 8;
    const bool padA = c->unalignedA || kp != p.k, padB = c->unalignedB || kp != p.k;
    struct PadPush {
      uint64_t x, y;
      uint32_t rows, cols, ld, rowsP, colsP, batch, batchRank;
      uint32_t sizes[kMaxBatchRank], strides[kMaxBatchRank];
    };
    // a as [M, K] -> [M, kp]; b as [N, K] -> [N, kp], as [K, N] -> [kp, np];
    // each matrix of the batch one after another. nullopt where the pad
    // kernel's 32-bit indices would not reach.
    auto padPush = [&](uint64_t x, int64_t rows, int64_t cols, int64_t ld, int64_t rowsP, int64_t colsP,
                       const std::vector<int64_t>& strides) -> std::optional<PadPush> {
      int64_t last = (rows - 1) * ld + cols;
      for (size_t d = 0; d < p.batch.size(); ++d) last += (p.batch[d] - 1) * strides[d];
      if (last >= (int64_t(1) << 31) || batch * rowsP * colsP >= (int64_t(1) << 31)) return std::nullopt;
      PadPush pp{};
      pp.x = x;
      pp.rows = uint32_t(rows), pp.cols = uint32_t(cols), pp.ld = uint32_t(ld);
      pp.rowsP = uint32_t(rowsP), pp.colsP = uint32_t(colsP);
      pp.batch = uint32_t(batch), pp.batchRank = uint32_t(p.batch.size());
      for (size_t d = 0; d < p.batch.size(); ++d)
        pp.sizes[d] = uint32_t(p.batch[d]), pp.strides[d] = uint32_t(strides[d]);
      return pp;
    };
    // Batch strides of a and b (none for an unbatched product).
    const std::vector<int64_t> unbatched;
    const auto& bsA = p.bs.size() > 0 ? p.bs[0] : unbatched;
    const auto& bsB = p.bs.size() > 1 ? p.bs[1] : unbatched;
    std::optional<PadPush> ppA, ppB;
    if (padA && !(ppA = padPush(push.a, p.m, p.k, p.sam, p.m, kp, bsA))) return false;
    if (padB) {
      ppB = c->transB ? padPush(push.b, p.n, p.k, p.sbn, p.n, kp, bsB) : padPush(push.b, p.k, p.n, p.sbk, kp, np, bsB);
      if (!ppB) return false;
    }
    const uint64_t esize = dtypeSize(dtype);
    std::shared_ptr<Buffer> a, b;
    try {
      if (padA) a = r.scratch(uint64_t(batch) * ppA->rowsP * ppA->colsP * esize);
      if (padB) b = r.scratch(uint64_t(batch) * ppB->rowsP * ppB->colsP * esize);
    } catch (const ComputeError& e) {
      if (e.kind() != ComputeError::Kind::kOutOfMemory) throw;
      return false;  // the unpadded kernels need no scratch memory
    }
    // The copies' batch strides: matrices one after another, the last dim fastest.
    auto denseStrides = [&](int64_t matrix) {
      std::vector<int64_t> strides(p.batch.size());
      for (size_t d = p.batch.size(); d-- > 0; matrix *= p.batch[d]) strides[d] = matrix;
      return strides;
    };
    Plan q = p;
    q.k = kp;
    q.bs.resize(std::max<size_t>(q.bs.size(), 3));
    Push padded = push;
    if (padA) {
      ppA->y = padded.a = a->deviceAddress();
      r.dispatch(padSource(dtype), *ppA, r.groupsFor(uint64_t(batch) * ppA->rowsP * ppA->colsP, 256));
      q.sam = kp;
      q.bs[0] = denseStrides(p.m * kp);
    }
    if (padB) {
      ppB->y = padded.b = b->deviceAddress();
      r.dispatch(padSource(dtype), *ppB, r.groupsFor(uint64_t(batch) * ppB->rowsP * ppB->colsP, 256));
      if (c->transB) {
        q.sbn = kp;
      } else {
        q.sbk = np;
        q.bRowsPadded = true;
      }
      q.bs[1] = denseStrides(int64_t(ppB->rowsP) * ppB->colsP);
    }
    const auto aligned = coopConfig(q, dtype, r.features(), {padded.a, padded.b, padded.y}, true);
    if (!aligned || aligned->unalignedA || aligned->unalignedB) {
      throw std::logic_error("matmul: padded operands are not aligned");
    }
    padded.meta = r.params(metaOf(q, batch));
    const uint64_t tiles =
        uint64_t((q.m + aligned->bm - 1) / aligned->bm) * uint64_t((q.n + aligned->bn - 1) / aligned->bn);
    r.dispatch(coopSource(dtype, *aligned), padded, r.groupsFor(tiles, 1, 0), 1, r.groupsFor(uint64_t(batch), 1, 2));
    return true;
  }

  // Records y = alpha * (a @ b) + beta * c with the fastest kernel that applies.
  // `pad`: unaligned a and b may be copied padded (dispatchPadded).
  static void dispatchProduct(Recorder& r, const Plan& p, int64_t batch, DType dtype, const Push& push,
                              bool pad = true) {
    if (p.m < kSmall || p.n < kSmall) {
      uint64_t total = uint64_t(batch * p.m * p.n);
      r.dispatch(matmulSource(dtype, true), push, r.groupsFor(total, 256));
      return;
    }
    if (pad && dispatchPadded(r, p, batch, dtype, push)) return;
    auto c = coopConfig(p, dtype, r.features(), {push.a, push.b, push.y}, true);
    // f16 and bf16 loaded one element at a time lose to the FMA kernel
    // (unalignedOf), and so do small products (unalignedPays).
    if (c && (c->unalignedA || c->unalignedB) && (dtype != DType::F32 || !unalignedPays(p, batch, dtype))) c.reset();
    if (c) {
      uint64_t tiles = uint64_t((p.m + c->bm - 1) / c->bm) * uint64_t((p.n + c->bn - 1) / c->bn);
      r.dispatch(coopSource(dtype, *c), push, r.groupsFor(tiles, 1, 0), 1, r.groupsFor(uint64_t(batch), 1, 2));
      return;
    }
    if (auto f = fastConfig(p, batch, dtype, {push.a, push.b, push.y}, r.features())) {
      r.dispatch(fastSource(dtype, *f), push, r.groupsFor(uint64_t(p.n), uint64_t(f->bn), 0),
                 r.groupsFor(uint64_t(p.m), uint64_t(f->bm), 1), r.groupsFor(uint64_t(batch), 1, 2));
      return;
    }
    r.dispatch(matmulSource(dtype, false), push, r.groupsFor(uint64_t(p.n), 64, 0),
               r.groupsFor(uint64_t(p.m), 64, 1), r.groupsFor(uint64_t(batch), 1, 2));
  }

  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs& attrs) const override {
    std::vector<TensorDesc> descs;
    for (const auto& v : in) descs.push_back(v.desc);
    Plan p = plan(op, descs, attrs);
    int64_t batch = 1;
    for (int64_t d : p.batch) batch *= d;
    if (batch * p.m * p.n == 0) return;
    size_t ia = 0, ib = 1, ic = 2;
    if (kind_ == MatmulKind::kAddmm || kind_ == MatmulKind::kBaddbmm) ia = 1, ib = 2, ic = 0;
    const DType dtype = out[0].desc.dtype;
    Push push{in[ia].buffer->deviceAddress(), in[ib].buffer->deviceAddress(),
              p.bias ? in[ic].buffer->deviceAddress() : 0, out[0].buffer->deviceAddress(), 0};
    if (int64_t slices = splitK(p, batch, dtype, r.features(), {push.a, push.b, push.y}); slices > 1) {
      // Slice s multiplies a[:, s*ks:(s+1)*ks] by b[s*ks:(s+1)*ks, :]: a batch of
      // `slices` products whose batch strides step along K.
      const int64_t ks = p.k / slices;
      Plan part = p;
      part.k = ks;
      part.batch = {slices};
      part.bs = {{ks * p.sak}, {ks * p.sbk}, {0}};
      part.bias = false;
      part.alpha = 1;
      std::shared_ptr<Buffer> partial;
      try {
        partial = r.scratch(uint64_t(slices * p.m * p.n) * 4);
      } catch (const ComputeError& e) {
        if (e.kind() != ComputeError::Kind::kOutOfMemory) throw;
      }
      if (!partial) {  // the product unsplit needs no scratch memory
        push.meta = r.params(metaOf(p, batch));
        dispatchProduct(r, p, batch, dtype, push);
        return;
      }
      Push first = push;
      first.y = partial->deviceAddress();
      first.meta = r.params(metaOf(part, slices));
      if (dtype == DType::F32) {
        // Unaligned slices load a and b one element at a time: copies would
        // add the operands' size to the partial products' scratch.
        dispatchProduct(r, part, slices, dtype, first, false);
      } else {  // f32 products on tensor cores (splitK checked that they apply)
        const auto c = coopConfig(part, dtype, r.features(), {first.a, first.b, first.y});
        if (!c) throw std::logic_error("matmul: split-K slices without the tensor-core kernel");
        const uint64_t tiles = uint64_t((p.m + c->bm - 1) / c->bm) * uint64_t((p.n + c->bn - 1) / c->bn);
        r.dispatch(coopSource(dtype, *c, true), first, r.groupsFor(tiles, 1, 0), 1,
                   r.groupsFor(uint64_t(slices), 1, 2));
      }
      Push second = push;
      second.a = partial->deviceAddress();
      Plan sum = part;  // the epilogue of the whole product: bias, alpha, beta
      sum.bias = p.bias;
      sum.alpha = p.alpha;
      second.meta = r.params(metaOf(sum, slices));
      r.dispatch(splitSumSource(dtype), second, r.groupsFor(uint64_t(p.m * p.n), 256));
      return;
    }
    push.meta = r.params(metaOf(p, batch));
    dispatchProduct(r, p, batch, dtype, push);
  }

 private:
  MatmulKind kind_;
};

class Dot final : public KernelTemplate {
 public:
  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs&) const override {
    for (size_t i = 0; i < 2; ++i) {
      if (in[i].rank() != 1) {
        throwInvalid(op.name + ": input " + q(op.inputName(i)) + " is " + in[i].str() + "; expected a 1-D tensor");
      }
    }
    if (in[0].shape[0] != in[1].shape[0]) {
      throwInvalid(op.name + ": input 'other' has " + std::to_string(in[1].shape[0]) + " elements; expected " +
                   std::to_string(in[0].shape[0]) + " like 'input'");
    }
    return {TensorDesc{in[0].dtype, {}}};
  }

  std::vector<const KernelSource*> variants(const OpSpec&, DType dtype) const override {
    return {&dotSource(dtype, 1), &dotSource(dtype, 2)};
  }

  void record(const OpSpec&, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs&) const override {
    DType dtype = in[0].desc.dtype;
    uint64_t n = uint64_t(in[0].desc.numel());
    uint32_t groups = std::max<uint32_t>(1, std::min<uint32_t>(r.groupsFor(n, 256 * 16), 512));
    auto part = r.scratch(uint64_t(groups) * dtypeSize(dotAccumulator(dtype)));
    struct Push {
      uint64_t a, b, part, y;
      uint32_t n, groups;
    } push{in[0].buffer->deviceAddress(), in[1].buffer->deviceAddress(), part->deviceAddress(),
           out[0].buffer->deviceAddress(), uint32_t(n), groups};
    r.dispatch(dotSource(dtype, 1), push, groups);
    r.dispatch(dotSource(dtype, 2), push, 1);
  }
};

// The plan of a contiguous batched product [batch, m, k] @ [batch, k, n].
Plan batchedPlan(int64_t batch, int64_t m, int64_t n, int64_t k) {
  Plan p;
  p.m = m, p.n = n, p.k = k;
  p.batch = {batch};
  p.bs = {{m * k}, {k * n}, {0}};
  p.sam = k, p.sak = 1, p.sbk = n, p.sbn = 1;
  p.alpha = 1, p.beta = 0;
  return p;
}

}  // namespace

bool tensorCoreProductF32(const DeviceFeatures* features, DType dtype, int64_t batch, int64_t m, int64_t n,
                          int64_t k) {
  const int64_t words = batch * std::max({m * k, k * n, m * n});
  return words < (int64_t(1) << 31) && Matmul::coopConfig(batchedPlan(batch, m, n, k), dtype, features, {}).has_value();
}

void recordTensorCoreProductF32(Recorder& r, DType dtype, uint64_t a, uint64_t b, uint64_t y, int64_t batch, int64_t m,
                                int64_t n, int64_t k) {
  const Plan p = batchedPlan(batch, m, n, k);
  const auto c = Matmul::coopConfig(p, dtype, r.features(), {a, b, y});
  if (!c || !tensorCoreProductF32(r.features(), dtype, batch, m, n, k)) {
    throw std::logic_error("recordTensorCoreProductF32: the tensor-core product does not apply");
  }
  struct Push {
    uint64_t a, b, c, y, meta;
  } push{a, b, 0, y, r.params(Matmul::metaOf(p, batch))};
  const uint64_t tiles = uint64_t((m + c->bm - 1) / c->bm) * uint64_t((n + c->bn - 1) / c->bn);
  r.dispatch(coopSource(dtype, *c, true), push, r.groupsFor(tiles, 1, 0), 1, r.groupsFor(uint64_t(batch), 1, 2));
}

std::shared_ptr<const KernelTemplate> matmul(MatmulKind kind) { return std::make_shared<Matmul>(kind); }

std::shared_ptr<const KernelTemplate> dot() { return std::make_shared<Dot>(); }

}  // namespace tensord::compute
