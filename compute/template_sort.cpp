// The sort template (see template_sort.h) and the GLSL it generates from
// kernels/sort.comp.

#include "compute/template_sort.h"

#include <algorithm>

#include "compute/buffer.h"
#include "compute/error.h"
#include "compute/glsl.h"
#include "compute/op_spec.h"
#include "compute/template_util.h"

namespace tensord::compute {
namespace {

struct Push {
  uint64_t x, y, z, keys, idx;
  uint32_t rows, len, inner, pow2, outLen, k, j, descending;
};

constexpr uint64_t kLocalMax = 1024;  // shared-memory capacity of MODE_LOCAL, in elements
constexpr const char* kModes[] = {"MODE_LOCAL", "MODE_INIT", "MODE_STEP", "MODE_FINAL"};

class Sort final : public KernelTemplate {
 public:
  explicit Sort(SortKind kind) : kind_(kind) {}

  struct Geometry {
    int64_t dim = 0;
    uint64_t outer = 1, len = 1, inner = 1, outLen = 1;
    bool descending = false;
  };

  Geometry geometry(const OpSpec& op, const TensorDesc& in, const Attrs& attrs) const {
    Geometry g;
    g.dim = normalizeDim(op.name, attrs.getInt("dim"), in.rank());
    for (size_t i = 0; i < in.shape.size(); ++i) {
      if (int64_t(i) < g.dim) g.outer *= uint64_t(in.shape[i]);
      else if (int64_t(i) == g.dim) g.len = uint64_t(in.shape[i]);
      else g.inner *= uint64_t(in.shape[i]);
    }
    g.outLen = g.len;
    if (kind_ == SortKind::kTopk) {
      int64_t k = attrs.getInt("k");
      if (k < 0 || uint64_t(k) > g.len) {
        throwInvalid(op.name + ": attribute 'k' is " + std::to_string(k) + "; expected k in [0, " +
                     std::to_string(g.len) + "] (the size of dim " + std::to_string(g.dim) + " of input " + in.str() +
                     ")");
      }
      g.outLen = uint64_t(k);
      g.descending = attrs.getBool("largest");
    } else {
      g.descending = attrs.getBool("descending");
    }
    return g;
  }

  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const override {
    Geometry g = geometry(op, in[0], attrs);
    Shape shape = in[0].shape;
    if (!shape.empty()) shape[size_t(g.dim)] = int64_t(g.outLen);
    if (kind_ == SortKind::kArgsort) return {TensorDesc{DType::I64, shape}};
    return {TensorDesc{in[0].dtype, shape}, TensorDesc{DType::I64, shape}};
  }

  const KernelSource& source(const OpSpec& op, DType dtype, int mode) const {
    std::string key = op.name + "|" + std::string(dtypeName(dtype)) + "|" + kModes[mode];
    return variants_.get(key, [&] {
      DType acc = isFloating(dtype) ? DType::F32 : DType::I64;
      GlslBuilder b(dtype);
      b.input("x", dtype);
      b.output("y", dtype, acc);
      b.output("z", DType::I64, DType::I64);
      b.define("A", std::string(glslType(acc)));
      if (acc == DType::F32) b.define("ACC_FLOAT");
      b.define("LOADA(i)", glslConvert("LOAD_x(i)", dtype, acc));
      if (kind_ != SortKind::kArgsort) b.define("WRITE_VALUES");
      b.define(kModes[mode]);
      return b.build(kernelFile("sort.comp"));
    });
  }

  void grid(const Recorder& r, uint64_t groups, uint32_t* gx, uint32_t* gy) const {
    groups = std::max<uint64_t>(groups, 1);
    *gx = uint32_t(std::min<uint64_t>(groups, r.maxGroups(0)));
    *gy = uint32_t(std::min<uint64_t>((groups + *gx - 1) / *gx, r.maxGroups(1)));
  }

  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs& attrs) const override {
    Geometry g = geometry(op, in[0].desc, attrs);
    uint64_t rows = g.outer * g.inner;
    if (rows == 0 || g.len == 0 || g.outLen == 0) return;
    uint64_t pow2 = 1;
    while (pow2 < g.len) pow2 <<= 1;
    Push push{};
    push.x = in[0].buffer->deviceAddress();
    if (kind_ == SortKind::kArgsort) {
      push.z = out[0].buffer->deviceAddress();
    } else {
      push.y = out[0].buffer->deviceAddress();
      push.z = out[1].buffer->deviceAddress();
    }
    push.rows = uint32_t(rows);
    push.len = uint32_t(g.len);
    push.inner = uint32_t(g.inner);
    push.pow2 = uint32_t(pow2);
    push.outLen = uint32_t(g.outLen);
    push.descending = g.descending ? 1 : 0;
    DType dtype = in[0].desc.dtype;
    uint32_t gx, gy;
    // Short rows (many of them, a workgroup each would idle) and long rows
    // (past shared memory) take the global sort.
    if (pow2 >= 32 && pow2 <= kLocalMax) {
      grid(r, rows, &gx, &gy);
      r.dispatch(source(op, dtype, 0), push, gx, gy);
      return;
    }
    uint64_t total = rows * pow2;
    auto keys = r.scratch(total * 8);
    auto idx = r.scratch(total * 4);
    push.keys = keys->deviceAddress();
    push.idx = idx->deviceAddress();
    grid(r, (total + 255) / 256, &gx, &gy);
    r.dispatch(source(op, dtype, 1), push, gx, gy);
    grid(r, (total / 2 + 255) / 256, &gx, &gy);
    for (uint64_t k = 2; k <= pow2; k <<= 1) {
      for (uint64_t j = k >> 1; j > 0; j >>= 1) {
        push.k = uint32_t(k);
        push.j = uint32_t(j);
        r.dispatch(source(op, dtype, 2), push, gx, gy);
      }
    }
    grid(r, (rows * g.outLen + 255) / 256, &gx, &gy);
    r.dispatch(source(op, dtype, 3), push, gx, gy);
  }

  std::vector<const KernelSource*> variants(const OpSpec& op, DType dtype) const override {
    std::vector<const KernelSource*> out;
    for (int mode = 0; mode < 4; ++mode) out.push_back(&source(op, dtype, mode));
    return out;
  }

 private:
  SortKind kind_;
  KernelVariants variants_;
};

}  // namespace

std::shared_ptr<const KernelTemplate> sortTemplate(SortKind kind) { return std::make_shared<Sort>(kind); }

}  // namespace tensord::compute
