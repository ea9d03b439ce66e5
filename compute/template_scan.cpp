// The scan template (see template_scan.h) and the GLSL it generates from
// kernels/scan.comp.

#include "compute/template_scan.h"

#include <algorithm>

#include "compute/error.h"
#include "compute/glsl.h"
#include "compute/op_spec.h"
#include "compute/template_util.h"

namespace tensord::compute {
namespace {

struct Push {
  uint64_t x, y;
  uint32_t outer, len, inner;
};

class Scan final : public KernelTemplate {
 public:
  explicit Scan(ScanKind kind) : kind_(kind) {}

  static DType outDType(DType in) { return isFloating(in) ? in : DType::I64; }

  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const override {
    normalizeDim(op.name, attrs.getInt("dim"), in[0].rank());
    return {TensorDesc{outDType(in[0].dtype), in[0].shape}};
  }

  const KernelSource& source(const OpSpec& op, DType dtype, bool rows) const {
    std::string key = op.name + "|" + std::string(dtypeName(dtype)) + (rows ? "|rows" : "|lines");
    return variants_.get(key, [&] {
      DType acc = isFloating(dtype) ? DType::F32 : DType::I64;
      GlslBuilder b(dtype);
      b.input("x", dtype);
      b.output("y", outDType(dtype), acc);
      b.define("A", std::string(glslType(acc)));
      b.define("LOADA(i)", glslConvert("LOAD_x(i)", dtype, acc));
      b.define(kind_ == ScanKind::kCumsum ? "OP_CUMSUM" : "OP_CUMPROD");
      b.define("ROWS", rows ? "1" : "0");
      return b.build(kernelFile("scan.comp"));
    });
  }

  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs& attrs) const override {
    const Shape& shape = in[0].desc.shape;
    if (in[0].desc.numel() == 0) return;
    int64_t dim = normalizeDim(op.name, attrs.getInt("dim"), shape.size());
    uint64_t outer = 1, len = 1, inner = 1;
    for (size_t i = 0; i < shape.size(); ++i) {
      if (int64_t(i) < dim) outer *= uint64_t(shape[i]);
      else if (int64_t(i) == dim) len = uint64_t(shape[i]);
      else inner *= uint64_t(shape[i]);
    }
    Push push{in[0].buffer->deviceAddress(), out[0].buffer->deviceAddress(), uint32_t(outer), uint32_t(len),
              uint32_t(inner)};
    // Long contiguous rows: a workgroup per row; else a thread per line.
    bool rows = inner == 1 && len >= 1024;
    uint64_t groups = rows ? outer : (outer * inner + 255) / 256;
    uint32_t gx = uint32_t(std::min<uint64_t>(groups, r.maxGroups(0)));
    uint32_t gy = uint32_t(std::min<uint64_t>((groups + gx - 1) / gx, r.maxGroups(1)));
    r.dispatch(source(op, in[0].desc.dtype, rows), push, gx, gy);
  }

  std::vector<const KernelSource*> variants(const OpSpec& op, DType dtype) const override {
    return {&source(op, dtype, false), &source(op, dtype, true)};
  }

 private:
  ScanKind kind_;
  KernelVariants variants_;
};

}  // namespace

std::shared_ptr<const KernelTemplate> scan(ScanKind kind) { return std::make_shared<Scan>(kind); }

}  // namespace tensord::compute
