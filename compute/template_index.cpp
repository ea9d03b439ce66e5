// The index templates (see template_index.h) and the GLSL they generate from
// kernels/index_gather.comp, index_scatter.comp and index_masked.comp.

#include "compute/template_index.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "compute/error.h"
#include "compute/glsl.h"
#include "compute/op_spec.h"
#include "compute/template_util.h"

namespace tensord::compute {
namespace {


int64_t numelOf(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

// IDX_T: the index type, computed in as stored (i32 indices widened to
// int64 compared wrongly on lavapipe); IDX_HI(v): the high word of v as int64.
void defineIndex(GlslBuilder& b, DType indexType) {
  if (indexType == DType::I64) {
    b.define("IDX_T", "int64_t").define("IDX_HI(v)", "uint(uint64_t(v) >> 32)");
  } else {
    b.define("IDX_T", "int").define("IDX_HI(v)", "((v) < 0 ? 0xffffffffu : 0u)");
  }
}

// The describer of an out-of-range index found on the device.
DeviceErrorDescriber indexError(std::string op, std::string where) {
  return [op = std::move(op), where = std::move(where)](const uint32_t* w) {
    int64_t v = int64_t(uint64_t(w[1]) | (uint64_t(w[2]) << 32));
    return op + ": index " + std::to_string(v) + " is out of range for " + where;
  };
}

std::string dimWhere(int64_t dim, int64_t size) {
  return "dim " + std::to_string(dim) + " of size " + std::to_string(size);
}

// ------------------------------------------------------------------ gather

struct GatherPush {
  uint64_t y, x, idx, meta, err;
  uint32_t n, rank, dimStride;
  int32_t dimSize;
};

struct GatherPlan {
  Shape out;
  std::vector<uint32_t> meta;  // per out dim: size, idxStride, inStride
  int64_t dim = 0, dimStride = 0, dimSize = 0;
  std::string where;
};

class IndexGather final : public KernelTemplate {
 public:
  explicit IndexGather(GatherKind kind) : kind_(kind) {}

  GatherPlan plan(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const {
    const TensorDesc& x = in[0];
    const TensorDesc& index = in[1];
    GatherPlan g;
    auto xs = contiguousStrides(x.shape);
    if (kind_ == GatherKind::kTake) {
      g.out = index.shape;
      g.dimSize = x.numel();
      g.dimStride = 1;
      auto is = contiguousStrides(index.shape);
      for (size_t d = 0; d < g.out.size(); ++d) g.meta.insert(g.meta.end(), {uint32_t(g.out[d]), uint32_t(is[d]), 0u});
      g.where = "the flattened input of size " + std::to_string(g.dimSize);
    } else if (kind_ == GatherKind::kIndexSelect) {
      if (index.rank() > 1) {
        throwInvalid(op.name + ": input 'index' is " + index.str() + "; expected a 1-D (or 0-d) index");
      }
      int64_t dim = normalizeDim(op.name, attrs.getInt("dim"), x.rank());
      Shape xsh = x.rank() ? x.shape : Shape{1};
      if (x.rank() == 0) xs = {1};
      g.dim = dim;
      g.dimSize = xsh[size_t(dim)];
      g.dimStride = xs[size_t(dim)];
      g.out = xsh;
      g.out[size_t(dim)] = index.numel();
      for (size_t d = 0; d < g.out.size(); ++d) {
        bool at = int64_t(d) == dim;
        g.meta.insert(g.meta.end(), {uint32_t(g.out[d]), at ? 1u : 0u, at ? 0u : uint32_t(xs[d])});
      }
      if (x.rank() == 0) g.out = index.rank() == 0 ? Shape{} : Shape{index.numel()};
      g.where = dimWhere(dim, g.dimSize);
    } else {
      int64_t dim = normalizeDim(op.name, attrs.getInt("dim"), x.rank());
      if (index.rank() != x.rank()) {
        throwInvalid(op.name + ": input 'index' is " + index.str() + "; expected rank " + std::to_string(x.rank()) +
                     " like the input " + x.str());
      }
      Shape xsh = x.rank() ? x.shape : Shape{1};
      Shape ish = index.rank() ? index.shape : Shape{1};
      if (x.rank() == 0) xs = {1};
      for (size_t d = 0; d < ish.size(); ++d) {
        if (int64_t(d) != dim && ish[d] > xsh[d]) {
          throwInvalid(op.name + ": input 'index' is " + index.str() + "; expected size <= " + std::to_string(xsh[d]) +
                       " in dim " + std::to_string(d) + " (the input " + x.str() + ")");
        }
      }
      g.dim = dim;
      g.dimSize = xsh[size_t(dim)];
      g.dimStride = xs[size_t(dim)];
      g.out = index.shape;
      auto is = contiguousStrides(ish);
      for (size_t d = 0; d < ish.size(); ++d) {
        bool at = int64_t(d) == dim;
        g.meta.insert(g.meta.end(), {uint32_t(ish[d]), uint32_t(is[d]), at ? 0u : uint32_t(xs[d])});
      }
      g.where = dimWhere(dim, g.dimSize);
    }
    if (g.dimSize == 0 && numelOf(g.out) > 0) {
      throwInvalid(op.name + ": input 'index' has " + std::to_string(numelOf(g.out)) +
                   " indices but they select from " + g.where + "; every index is out of range");
    }
    return g;
  }

  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const override {
    return {TensorDesc{in[0].dtype, plan(op, in, attrs).out}};
  }

  const KernelSource& source(DType dtype, DType indexType) const {
    std::string key = "index_gather|" + std::string(dtypeName(dtype)) + "|" + std::string(dtypeName(indexType));
    return variants_.get(key, [&] {
      GlslBuilder b(dtype);
      b.output("y", dtype).input("x", dtype).input("idx", indexType);
      defineIndex(b, indexType);
      return b.build(kernelFile("index_gather.comp"));
    });
  }

  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs& attrs) const override {
    std::vector<TensorDesc> descs{in[0].desc, in[1].desc};
    GatherPlan g = plan(op, descs, attrs);
    int64_t n = out[0].desc.numel();
    if (n == 0) return;
    GatherPush push{};
    push.y = out[0].buffer->deviceAddress();
    push.x = in[0].buffer->deviceAddress();
    push.idx = in[1].buffer->deviceAddress();
    push.meta = r.params(g.meta);
    push.err = r.errorSlot(indexError(op.name, g.where));
    push.n = uint32_t(n);
    push.rank = uint32_t(g.meta.size() / 3);
    push.dimStride = uint32_t(g.dimStride);
    push.dimSize = int32_t(g.dimSize);
    r.dispatch(source(out[0].desc.dtype, in[1].desc.dtype), push, r.groupsFor(uint64_t(n), 256));
  }

  std::vector<const KernelSource*> variants(const OpSpec&, DType dtype) const override {
    return {&source(dtype, DType::I32), &source(dtype, DType::I64)};
  }

 private:
  GatherKind kind_;
  KernelVariants variants_;
};

// ------------------------------------------------------------------ scatter

struct ScatterPush {
  uint64_t y, x, idx, src, meta, err;
  uint32_t n, rank, dim, J;
  int32_t dimSize;
  uint32_t flags;
};

struct ScatterPlan {
  std::vector<uint32_t> meta;
  int64_t dim = 0, J = 0, dimSize = 0;
  bool accumulate = false, scalar = false;
  double value = 0;
};

class IndexScatter final : public KernelTemplate {
 public:
  explicit IndexScatter(ScatterKind kind) : kind_(kind) {}

  ScatterPlan plan(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const {
    const TensorDesc& x = in[0];
    const TensorDesc& index = in[1];
    ScatterPlan s;
    Shape xsh = x.rank() ? x.shape : Shape{1};
    Shape posSize;
    std::vector<int64_t> idxStrides, srcStrides;
    if (kind_ == ScatterKind::kIndexPut) {
      if (x.rank() == 0) throwInvalid(op.name + ": the input is 0-d; expected at least 1 dim");
      if (index.rank() != 1) {
        throwInvalid(op.name + ": input 'indices' is " + index.str() +
                     "; expected one 1-D index tensor (for dim 0 of the input)");
      }
      posSize = x.shape;
      posSize[0] = index.shape[0];
      if (!broadcastShapes(in[2].shape, posSize) || *broadcastShapes(in[2].shape, posSize) != posSize) {
        throwInvalid(op.name + ": input 'values' is " + in[2].str() + "; expected a shape that broadcasts to " +
                     shapeStr(posSize) + " (the indexed part of the input " + x.str() + ")");
      }
      idxStrides.assign(x.rank(), 0);
      idxStrides[0] = 1;
      srcStrides = broadcastStrides(in[2].shape, posSize);
      s.dim = 0;
      s.accumulate = attrs.getBool("accumulate");
    } else {
      s.dim = normalizeDim(op.name, attrs.getInt("dim"), x.rank());
      if (index.rank() != x.rank()) {
        throwInvalid(op.name + ": input 'index' is " + index.str() + "; expected rank " + std::to_string(x.rank()) +
                     " like the input " + x.str());
      }
      posSize = index.rank() ? index.shape : Shape{1};
      idxStrides = contiguousStrides(posSize);
      for (size_t d = 0; d < posSize.size(); ++d) {
        if (int64_t(d) != s.dim && posSize[d] > xsh[d]) {
          throwInvalid(op.name + ": input 'index' is " + index.str() + "; expected size <= " + std::to_string(xsh[d]) +
                       " in dim " + std::to_string(d) + " (the input " + x.str() + ")");
        }
      }
      if (in.size() > 2) {
        const TensorDesc& src = in[2];
        Shape ssh = src.rank() ? src.shape : Shape{1};
        bool ok = src.rank() == x.rank();
        for (size_t d = 0; ok && d < ssh.size(); ++d) ok = posSize[d] <= ssh[d];
        if (!ok) {
          throwInvalid(op.name + ": input 'src' is " + src.str() + "; expected rank " + std::to_string(x.rank()) +
                       " and at least the index's size " + index.str() + " in every dim");
        }
        srcStrides = contiguousStrides(ssh);
      } else {
        if (!attrs.has("value")) {
          throwInvalid(op.name + ": operand 'src' is missing; give it as an input tensor or as the scalar attribute 'value'");
        }
        s.scalar = true;
        s.value = attrs.getNumber("value");
        srcStrides.assign(xsh.size(), 0);
      }
      s.accumulate = kind_ == ScatterKind::kScatterAdd;
    }
    s.dimSize = xsh[size_t(s.dim)];
    s.J = posSize[size_t(s.dim)];
    if (s.dimSize == 0 && index.numel() > 0) {
      throwInvalid(op.name + ": input '" + op.inputs[1].name + "' has " + std::to_string(index.numel()) +
                   " indices but dim " + std::to_string(s.dim) + " of the input has size 0; every index is out of range");
    }
    appendScalarWords(s.meta, s.value);
    for (size_t d = 0; d < xsh.size(); ++d) {
      s.meta.insert(s.meta.end(),
                    {uint32_t(xsh[d]), uint32_t(posSize[d]), uint32_t(idxStrides[d]), uint32_t(srcStrides[d])});
    }
    return s;
  }

  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const override {
    plan(op, in, attrs);
    return {in[0]};
  }

  const KernelSource& source(DType dtype, DType indexType) const {
    std::string key = "index_scatter|" + std::string(dtypeName(dtype)) + "|" + std::string(dtypeName(indexType));
    return variants_.get(key, [&] {
      GlslBuilder b(dtype);
      b.output("y", dtype).input("x", dtype).input("idx", indexType).input("src", dtype);
      defineIndex(b, indexType);
      return b.build(kernelFile("index_scatter.comp"));
    });
  }

  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs& attrs) const override {
    std::vector<TensorDesc> descs;
    for (const auto& v : in) descs.push_back(v.desc);
    ScatterPlan s = plan(op, descs, attrs);
    int64_t n = out[0].desc.numel();
    if (n == 0) return;
    ScatterPush push{};
    push.y = out[0].buffer->deviceAddress();
    push.x = in[0].buffer->deviceAddress();
    push.idx = in[1].buffer->deviceAddress();
    push.src = in.size() > 2 ? in[2].buffer->deviceAddress() : push.x;
    push.meta = r.params(s.meta);
    push.err = r.errorSlot(indexError(op.name, dimWhere(s.dim, s.dimSize)));
    push.n = uint32_t(n);
    push.rank = uint32_t(s.meta.size() / 4 - 1);
    push.dim = uint32_t(s.dim);
    push.J = uint32_t(s.J);
    push.dimSize = int32_t(s.dimSize);
    push.flags = (s.accumulate ? 1u : 0u) | (s.scalar ? 2u : 0u);
    r.dispatch(source(out[0].desc.dtype, in[1].desc.dtype), push, r.groupsFor(uint64_t(n), 256));
  }

  std::vector<const KernelSource*> variants(const OpSpec&, DType dtype) const override {
    return {&source(dtype, DType::I32), &source(dtype, DType::I64)};
  }

 private:
  ScatterKind kind_;
  KernelVariants variants_;
};

// ------------------------------------------------------------------ masked_fill

struct MaskedPush {
  uint64_t y, x, mask, val, meta;
  uint32_t n, rank, tensorValue;
};

class MaskedFill final : public KernelTemplate {
 public:
  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const override {
    const TensorDesc& x = in[0];
    auto b = broadcastShapes(in[1].shape, x.shape);
    if (!b || *b != x.shape) {
      throwInvalid(op.name + ": input 'mask' is " + in[1].str() + "; expected a shape that broadcasts to the input " +
                   x.str());
    }
    if (in.size() > 2) {
      if (in[2].rank() != 0) {
        throwInvalid(op.name + ": input 'value' is " + in[2].str() + "; expected a 0-d tensor (or the scalar attribute 'value')");
      }
    } else if (!attrs.has("value")) {
      throwInvalid(op.name + ": operand 'value' is missing; give it as a 0-d tensor or as the scalar attribute 'value'");
    }
    return {x};
  }

  const KernelSource& source(DType dtype) const {
    std::string key = "index_masked|" + std::string(dtypeName(dtype));
    return variants_.get(key, [&] {
      GlslBuilder b(dtype);
      b.output("y", dtype).input("x", dtype).input("mask", DType::Bool).input("val", dtype);
      return b.build(kernelFile("index_masked.comp"));
    });
  }

  void record(const OpSpec&, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs& attrs) const override {
    int64_t n = out[0].desc.numel();
    if (n == 0) return;
    std::vector<uint32_t> meta;
    appendScalarWords(meta, in.size() > 2 ? 0.0 : attrs.getNumber("value"));
    const Shape& shape = out[0].desc.shape;
    auto ms = broadcastStrides(in[1].desc.shape, shape);
    for (size_t d = 0; d < shape.size(); ++d) meta.insert(meta.end(), {uint32_t(shape[d]), uint32_t(ms[d])});
    MaskedPush push{};
    push.y = out[0].buffer->deviceAddress();
    push.x = in[0].buffer->deviceAddress();
    push.mask = in[1].buffer->deviceAddress();
    push.val = in.size() > 2 ? in[2].buffer->deviceAddress() : push.x;
    push.meta = r.params(meta);
    push.n = uint32_t(n);
    push.rank = uint32_t(shape.size());
    push.tensorValue = in.size() > 2 ? 1 : 0;
    r.dispatch(source(out[0].desc.dtype), push, r.groupsFor(uint64_t(n), 256));
  }

  std::vector<const KernelSource*> variants(const OpSpec&, DType dtype) const override { return {&source(dtype)}; }

 private:
  KernelVariants variants_;
};

}  // namespace

std::shared_ptr<const KernelTemplate> indexGather(GatherKind kind) { return std::make_shared<IndexGather>(kind); }
std::shared_ptr<const KernelTemplate> indexScatter(ScatterKind kind) { return std::make_shared<IndexScatter>(kind); }
std::shared_ptr<const KernelTemplate> maskedFill() { return std::make_shared<MaskedFill>(); }

}  // namespace tensord::compute
