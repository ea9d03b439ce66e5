// The nn backward templates (see template_nn_backward.h) and the GLSL they
// generate from kernels/softmax_backward.comp, norm_backward.comp,
// norm_backward_affine.comp, loss_backward.comp, embedding_backward.comp and
// attention_backward.comp (row helpers: norm_rows.glsl).

#include "compute/template_nn_backward.h"

#include <algorithm>
#include <limits>

#include "compute/error.h"
#include "compute/glsl.h"
#include "compute/nn_rows.h"
#include "compute/op_spec.h"
#include "compute/template_util.h"

namespace tensord::compute {
namespace {

using nn_rows::kWG;

int64_t prod(const Shape& s, size_t from = 0) {
  int64_t n = 1;
  for (size_t i = from; i < s.size(); ++i) n *= s[i];
  return n;
}

std::string dt(DType d) { return std::string(dtypeName(d)); }

std::string rowsBody(const char* file) { return nn_rows::body(file); }
GlslBuilder rowBuilder(DType dtype, bool perThread) { return nn_rows::builder(dtype, perThread); }

void expectGradShape(const OpSpec& op, const TensorDesc& grad, const Shape& want) {
  if (grad.shape != want) {
    throwInvalid(op.name + ": input 'grad' has shape " + shapeStr(grad.shape) + "; expected " + shapeStr(want));
  }
}

// ---------------------------------------------------------------- softmax

struct SoftmaxBackwardPush {
  uint64_t dx, g, y;
  uint32_t rows, d, inner;
};

class SoftmaxBackward final : public KernelTemplate {
 public:
  explicit SoftmaxBackward(bool log) : log_(log) {}

  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const override {
    normalizeDim(op.name, attrs.getInt("dim"), in[1].rank());
    if (in[0].shape != in[1].shape) {
      throwInvalid(op.name + ": input 'grad' has shape " + shapeStr(in[0].shape) + "; expected " +
                   shapeStr(in[1].shape) + " like 'out'");
    }
    return {in[1]};
  }

  const KernelSource& source(const OpSpec& op, DType dtype, bool perThread) const {
    return variants_.get(op.name + "|" + dt(dtype) + (perThread ? "|thread" : "|team"), [&] {
      GlslBuilder b = rowBuilder(dtype, perThread);
      b.output("dx", dtype).input("g", dtype).input("y", dtype);
      if (log_) b.define("LOG");
      return b.build(rowsBody("softmax_backward.comp"));
    });
  }

  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs& attrs) const override {
    const Shape& s = in[1].desc.shape;
    if (in[1].desc.numel() == 0) return;
    size_t dim = size_t(normalizeDim(op.name, attrs.getInt("dim"), s.size()));
    const nn_rows::Layout l = nn_rows::around(s, dim);  // as the forward
    SoftmaxBackwardPush push{out[0].buffer->deviceAddress(), in[0].buffer->deviceAddress(),
                             in[1].buffer->deviceAddress(), uint32_t(l.rows), uint32_t(l.d), uint32_t(l.inner)};
    r.dispatch(source(op, in[1].desc.dtype, l.perThread), push,
               l.perThread ? r.groupsFor(uint64_t(l.rows), kWG) : r.groupsFor(uint64_t(l.rows), 1));
  }

  std::vector<const KernelSource*> variants(const OpSpec& op, DType dtype) const override {
    return {&source(op, dtype, false), &source(op, dtype, true)};
  }

 private:
  bool log_;
  KernelVariants variants_;
};

// ---------------------------------------------------------------- norms

struct NormBackwardPush {
  uint64_t dx, g, x, w, rm, rv, dw, db, stats;
  uint32_t rows, d, inner, outerStride, groups, affDiv;
  float eps;
};

struct NormAffinePush {
  uint64_t g, x, dw, db, part, stats;
  uint32_t A, inner, items, groups, cpg, chunks, chunkLen;
};

struct NormBackwardCfg {
  bool perThread = false, hasW = false, eval = false, sums = false, stats = false, hasDW = false, hasDB = false;
};

class NormBackward final : public KernelTemplate {
 public:
  NormBackward(NormKind kind, std::shared_ptr<const OpSpec> forward) : kind_(kind), forward_(std::move(forward)) {}

  // Positions in the backward call (grad first, then the forward's inputs).
  size_t weightAt() const { return kind_ == NormKind::kBatch ? 4 : 2; }
  size_t biasAt() const { return kind_ == NormKind::kBatch ? 5 : kind_ == NormKind::kRms ? SIZE_MAX : 3; }

  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const override {
    auto fwdOut = forwardOutputs(op, *forward_, in.subspan(1), attrs);
    expectGradShape(op, in[0], fwdOut[0].shape);
    std::vector<TensorDesc> out = {in[1]};
    if (in.size() > weightAt()) out.push_back(in[weightAt()]);
    if (in.size() > biasAt()) out.push_back(in[biasAt()]);
    return out;
  }

  const KernelSource& rowSource(const OpSpec& op, DType dtype, NormBackwardCfg c) const {
    std::string key = op.name + "|" + dt(dtype) + "|" + std::to_string(c.perThread) + std::to_string(c.hasW) +
                      std::to_string(c.eval) + std::to_string(c.sums) + std::to_string(c.stats) +
                      std::to_string(c.hasDW) + std::to_string(c.hasDB);
    return variants_.get(key, [&] {
      GlslBuilder b = rowBuilder(dtype, c.perThread);
      b.output("dx", dtype).input("g", dtype).input("x", dtype).input("w", dtype).input("rm", dtype);
      b.input("rv", dtype).output("dw", dtype).output("db", dtype);
      if (kind_ == NormKind::kRms) b.define("RMS");
      if (kind_ == NormKind::kBatch) b.define("BATCH");
      if (c.hasW) b.define("HAS_W");
      if (c.eval) b.define("EVAL");
      if (c.sums) b.define("NEED_SUMS");
      if (c.stats) b.define("STATS");
      if (c.hasDW) b.define("HAS_DW");
      if (c.hasDB) b.define("HAS_DB");
      return b.build(rowsBody("norm_backward.comp"));
    });
  }

  const KernelSource& affineSource(const OpSpec& op, DType dtype, bool final, bool hasDW, bool hasDB) const {
    std::string key = op.name + "|affine|" + dt(dtype) + "|" + std::to_string(final) + std::to_string(hasDW) +
                      std::to_string(hasDB);
    return variants_.get(key, [&] {
      GlslBuilder b = rowBuilder(dtype, false);
      b.input("g", dtype).input("x", dtype).output("dw", dtype).output("db", dtype);
      if (final) b.define("FINAL");
      if (hasDW) b.define("HAS_DW");
      if (hasDB) b.define("HAS_DB");
      return b.build(rowsBody("norm_backward_affine.comp"));
    });
  }

  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs& attrs) const override {
    const Shape& s = in[1].desc.shape;
    const int64_t numel = in[1].desc.numel();
    const DType dtype = in[1].desc.dtype;
    const bool hasW = in.size() > weightAt(), hasB = in.size() > biasAt();
    NormBackwardPush push{};
    NormBackwardCfg c{.hasW = hasW};
    push.dx = out[0].buffer->deviceAddress();
    push.g = in[0].buffer->deviceAddress();
    push.x = in[1].buffer->deviceAddress();
    push.w = hasW ? in[weightAt()].buffer->deviceAddress() : 0;
    push.groups = 1;
    push.affDiv = 1;
    uint64_t dw = hasW ? out[1].buffer->deviceAddress() : 0;
    uint64_t db = hasB ? out[hasW ? 2 : 1].buffer->deviceAddress() : 0;

    if (kind_ == NormKind::kBatch) {
      // A row is a channel: the weight and bias gradients are row sums.
      if (s[1] == 0) return;
      const int64_t hw = prod(s, 2);
      push.rows = uint32_t(s[1]);
      push.d = uint32_t(s[0] * hw);
      push.inner = uint32_t(hw);
      push.outerStride = uint32_t(s[1] * hw);
      push.eps = float(attrs.getFloat("eps"));
      c.eval = !attrs.getBool("training");
      if (c.eval) {
        push.rm = in[2].buffer->deviceAddress();
        push.rv = in[3].buffer->deviceAddress();
      }
      c.hasDW = hasW;
      c.hasDB = hasB;
      c.sums = !c.eval || c.hasDW || c.hasDB;
      push.dw = dw;
      push.db = db;
      r.dispatch(rowSource(op, dtype, c), push, r.groupsFor(push.rows, 1));
      return;
    }

    // layer / rms / group: the input as [outer, A, inner], statistics row o * groups + a / cpg.
    uint32_t outer, A, inner, groups = 1, cpg;
    if (kind_ == NormKind::kGroup) {
      const int64_t g = attrs.getInt("num_groups"), hw = prod(s, 2);
      push.rows = uint32_t(s[0] * g);
      push.d = push.inner = uint32_t(s[1] / g * hw);
      push.groups = uint32_t(g);
      push.affDiv = uint32_t(hw);
      push.eps = float(attrs.getFloat("eps"));
      outer = uint32_t(s[0]);
      A = uint32_t(s[1]);
      inner = uint32_t(hw);
      groups = uint32_t(g);
      cpg = uint32_t(s[1] / g);
    } else {
      const int64_t d = prod(Shape(attrs.getInts("normalized_shape")));
      push.rows = d == 0 ? 0 : uint32_t(numel / d);
      push.d = push.inner = uint32_t(d);
      if (attrs.has("eps")) {
        push.eps = float(attrs.getFloat("eps"));
      } else {  // rms_norm's default, as the forward: the dtype's machine epsilon
        push.eps = dtype == DType::F16 ? 0.0009765625f : dtype == DType::BF16 ? 0.0078125f
                                                                               : std::numeric_limits<float>::epsilon();
      }
      outer = push.rows;
      A = uint32_t(d);
      inner = 1;
      cpg = std::max<uint32_t>(A, 1);
    }
    const bool affine = hasW || hasB;
    std::shared_ptr<Buffer> stats;
    if (numel > 0) {
      c.perThread = push.d <= 64;
      c.sums = true;
      c.stats = affine;
      if (affine) {
        stats = r.scratch(std::max<uint64_t>(uint64_t(push.rows) * 8, 16));
        push.stats = stats->deviceAddress();
      }
      r.dispatch(rowSource(op, dtype, c), push, c.perThread ? r.groupsFor(push.rows, kWG) : r.groupsFor(push.rows, 1));
    }
    if (!affine || A == 0) return;
    // Weight and bias gradients: partial sums over shares of the (outer, inner)
    // range, enough of them to fill the device (the sums are latency-bound),
    // then one workgroup per affine index sums its shares.
    const uint64_t items = uint64_t(outer) * inner;
    const uint64_t chunks =
        items == 0 ? 0 : std::min<uint64_t>((items + 7) / 8, std::max<uint64_t>(1, (uint64_t(1) << 17) / A));
    NormAffinePush ap{};
    ap.g = push.g;
    ap.x = push.x;
    ap.dw = dw;
    ap.db = db;
    ap.stats = push.stats;
    ap.A = A;
    ap.inner = inner;
    ap.items = uint32_t(items);
    ap.groups = groups;
    ap.cpg = cpg;
    ap.chunks = uint32_t(chunks);
    ap.chunkLen = chunks == 0 ? 0 : uint32_t((items + chunks - 1) / chunks);
    auto part = r.scratch(std::max<uint64_t>(2 * chunks * A * 4, 16));
    ap.part = part->deviceAddress();
    if (chunks > 0) r.dispatch(affineSource(op, dtype, false, hasW, hasB), ap, r.groupsFor(chunks * A, kWG));
    r.dispatch(affineSource(op, dtype, true, hasW, hasB), ap, r.groupsFor(A, 1));
  }

  std::vector<const KernelSource*> variants(const OpSpec& op, DType dtype) const override {
    std::vector<const KernelSource*> v;
    const int maxParams = kind_ == NormKind::kRms ? 1 : 2;  // weight, then bias
    for (int wb = 0; wb <= maxParams; ++wb) {
      const bool hasW = wb > 0, hasB = wb > 1;
      if (kind_ == NormKind::kBatch) {
        for (bool eval : {false, true}) {
          v.push_back(&rowSource(op, dtype, {.hasW = hasW, .eval = eval, .sums = !eval || hasW, .hasDW = hasW,
                                             .hasDB = hasB}));
        }
        continue;
      }
      for (bool perThread : {false, true}) {
        v.push_back(&rowSource(op, dtype, {.perThread = perThread, .hasW = hasW, .sums = true, .stats = hasW}));
      }
      if (hasW) {
        v.push_back(&affineSource(op, dtype, false, true, hasB));
        v.push_back(&affineSource(op, dtype, true, true, hasB));
      }
    }
    return v;
  }

 private:
  NormKind kind_;
  std::shared_ptr<const OpSpec> forward_;
  KernelVariants variants_;
};

// ---------------------------------------------------------------- nll_loss, cross_entropy

struct ClassLossBackwardPush {
  uint64_t dx, g, x, t, w, part, err;
  uint32_t n, classes, inner;
  int32_t ignoreIndex;
  float smoothing;
  uint32_t scalarGrad, partials;
};

struct ClassLossCfg {
  bool total = false, perThread = false, hasW = false;
  DType target = DType::I64;
};

class ClassLossBackward final : public KernelTemplate {
 public:
  ClassLossBackward(LossKind kind, std::shared_ptr<const OpSpec> forward) : kind_(kind), forward_(std::move(forward)) {}

  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const override {
    auto fwdOut = forwardOutputs(op, *forward_, in.subspan(1), attrs);
    expectGradShape(op, in[0], fwdOut[0].shape);
    return {in[1]};
  }

  const KernelSource& source(const OpSpec& op, DType dtype, const ClassLossCfg& c) const {
    std::string key = op.name + "|" + dt(dtype) + "|" + dt(c.target) + "|" + std::to_string(c.total) +
                      std::to_string(c.perThread) + std::to_string(c.hasW);
    return variants_.get(key, [&] {
      GlslBuilder b = rowBuilder(dtype, c.perThread);
      b.output("dx", dtype).input("g", dtype).input("x", dtype).input("t", c.target).input("w", dtype);
      b.define("KIND", std::to_string(int(kind_)));
      if (c.target == DType::I64) b.define("IDX64");
      if (c.total) b.define("TOTAL");
      if (c.hasW) b.define("HAS_W");
      return b.build(rowsBody("loss_backward.comp"));
    });
  }

  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs& attrs) const override {
    const Shape& s = in[1].desc.shape;
    if (in[1].desc.numel() == 0) return;
    const std::string& red = attrs.getText("reduction");
    const DType dtype = in[1].desc.dtype;
    ClassLossCfg c{.hasW = in.size() > 3, .target = in[2].desc.dtype};
    ClassLossBackwardPush push{};
    push.dx = out[0].buffer->deviceAddress();
    push.g = in[0].buffer->deviceAddress();
    push.x = in[1].buffer->deviceAddress();
    push.t = in[2].buffer->deviceAddress();
    push.w = c.hasW ? in[3].buffer->deviceAddress() : 0;
    push.n = uint32_t(in[2].desc.numel());
    push.classes = uint32_t(s.size() == 1 ? s[0] : s[1]);
    push.inner = uint32_t(s.size() <= 2 ? 1 : prod(s, 2));
    push.ignoreIndex = int32_t(std::clamp<int64_t>(attrs.getInt("ignore_index"), INT32_MIN, INT32_MAX));
    if (attrs.has("label_smoothing")) push.smoothing = float(attrs.getFloat("label_smoothing"));
    push.scalarGrad = red == "none" ? 0 : 1;
    const std::string name = forward_->name;
    const uint32_t classes = push.classes;
    push.err = r.errorSlot([name, classes](const uint32_t* w) {
      int64_t t = int64_t(uint64_t(w[1]) | (uint64_t(w[2]) << 32));
      return name + ": target " + std::to_string(t) + " is out of range for " + std::to_string(classes) +
             " classes (and is not ignore_index)";
    });
    std::shared_ptr<Buffer> part;
    if (red == "mean") {
      // The denominator: the summed weights of the non-ignored targets, per workgroup first.
      const uint32_t groups = uint32_t(std::clamp<uint64_t>((uint64_t(push.n) + kWG * 8 - 1) / (kWG * 8), 1, 1024));
      part = r.scratch(std::max<uint64_t>(uint64_t(groups) * 4, 16));
      push.part = part->deviceAddress();
      ClassLossCfg tc = c;
      tc.total = true;
      r.dispatch(source(op, dtype, tc), push, groups);
      push.partials = groups;
    }
    c.perThread = push.classes <= 64 || (push.inner > 1 && push.n >= 4096);  // as softmax
    r.dispatch(source(op, dtype, c), push, c.perThread ? r.groupsFor(push.n, kWG) : r.groupsFor(push.n, 1));
  }

  std::vector<const KernelSource*> variants(const OpSpec& op, DType dtype) const override {
    std::vector<const KernelSource*> v;
    for (DType t : {DType::I32, DType::I64}) {
      for (bool hasW : {false, true}) {
        v.push_back(&source(op, dtype, {.total = true, .hasW = hasW, .target = t}));
        v.push_back(&source(op, dtype, {.perThread = false, .hasW = hasW, .target = t}));
        v.push_back(&source(op, dtype, {.perThread = true, .hasW = hasW, .target = t}));
      }
    }
    return v;
  }

 private:
  LossKind kind_;
  std::shared_ptr<const OpSpec> forward_;
  KernelVariants variants_;
};

// ---------------------------------------------------------------- embedding

struct EmbeddingGatherSumPush {
  uint64_t dw, g, sorted, perm;
  uint32_t n, dim, rows, pad;
};

class EmbeddingGatherSum final : public KernelTemplate {
 public:
  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const override {
    const int64_t n = in[1].numel();
    if (in[0].rank() != 2 || in[0].shape[0] != n || in[1].rank() != 1 || in[2].shape != in[1].shape) {
      throw std::logic_error(op.name + ": expected grad [n, dim], sorted [n] and perm [n]");
    }
    return {TensorDesc{in[0].dtype, {attrs.getInt("rows"), in[0].shape[1]}}};
  }

  const KernelSource& source(const OpSpec& op, DType dtype, DType index, bool pad) const {
    return variants_.get(op.name + "|" + dt(dtype) + "|" + dt(index) + "|" + std::to_string(pad), [&] {
      GlslBuilder b(dtype);
      b.output("dw", dtype).input("g", dtype).input("sorted", index).input("perm", DType::I64);
      if (index == DType::I64) b.define("IDX64");
      if (pad) b.define("HAS_PAD");
      return b.build(kernelFile("embedding_backward.comp"));
    });
  }

  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs& attrs) const override {
    const int64_t rows = attrs.getInt("rows"), dim = in[0].desc.shape[1];
    if (rows * dim == 0) return;
    const bool pad = attrs.has("padding_idx");
    int64_t padRow = pad ? attrs.getInt("padding_idx") : 0;
    if (padRow < 0) padRow += rows;
    EmbeddingGatherSumPush push{out[0].buffer->deviceAddress(), in[0].buffer->deviceAddress(),
                                in[1].buffer->deviceAddress(), in[2].buffer->deviceAddress(),
                                uint32_t(in[1].desc.numel()), uint32_t(dim), uint32_t(rows), uint32_t(padRow)};
    r.dispatch(source(op, in[0].desc.dtype, in[1].desc.dtype, pad), push, r.groupsFor(uint64_t(rows * dim), 256));
  }

  std::vector<const KernelSource*> variants(const OpSpec& op, DType dtype) const override {
    std::vector<const KernelSource*> v;
    for (DType index : {DType::I32, DType::I64}) {
      for (bool pad : {false, true}) v.push_back(&source(op, dtype, index, pad));
    }
    return v;
  }

 private:
  KernelVariants variants_;
};

// ---------------------------------------------------------------- attention

struct AttentionSoftmaxBackwardPush {
  uint64_t pr, ds, sc, dp;
  uint32_t rows, L, S, causal;
};

class AttentionSoftmaxBackward final : public KernelTemplate {
 public:
  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs&) const override {
    if (in[0].rank() < 2 || in[0].shape != in[1].shape) {
      throw std::logic_error(op.name + ": expected scores and dp of one shape [..., L, S]");
    }
    return {in[0], in[0]};
  }

  const KernelSource& source(const OpSpec& op, DType dtype, bool perThread) const {
    return variants_.get(op.name + "|" + dt(dtype) + (perThread ? "|thread" : "|team"), [&] {
      GlslBuilder b = rowBuilder(dtype, perThread);
      b.output("pr", dtype).output("ds", dtype).input("sc", dtype).input("dp", dtype);
      return b.build(rowsBody("attention_backward.comp"));
    });
  }

  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs& attrs) const override {
    const Shape& s = in[0].desc.shape;
    const int64_t numel = in[0].desc.numel();
    if (numel == 0) return;
    const int64_t S = s.back(), L = s[s.size() - 2], rows = numel / S;
    const bool perThread = S <= 64;
    AttentionSoftmaxBackwardPush push{out[0].buffer->deviceAddress(), out[1].buffer->deviceAddress(),
                                      in[0].buffer->deviceAddress(),  in[1].buffer->deviceAddress(),
                                      uint32_t(rows),                 uint32_t(L),
                                      uint32_t(S),                    attrs.getBool("is_causal") ? 1u : 0u};
    r.dispatch(source(op, in[0].desc.dtype, perThread), push,
               perThread ? r.groupsFor(uint64_t(rows), kWG) : r.groupsFor(uint64_t(rows), 1));
  }

  std::vector<const KernelSource*> variants(const OpSpec& op, DType dtype) const override {
    return {&source(op, dtype, false), &source(op, dtype, true)};
  }

 private:
  KernelVariants variants_;
};

}  // namespace

std::vector<TensorDesc> forwardOutputs(const OpSpec& backward, const OpSpec& forward,
                                       std::span<const TensorDesc> forwardInputs, const Attrs& attrs) {
  try {
    return inferOutputs(forward, forwardInputs, attrs);
  } catch (const ComputeError& e) {
    throw ComputeError(e.kind(), backward.name + ": " + e.what());
  }
}

std::shared_ptr<const KernelTemplate> softmaxBackwardTemplate(bool log) { return std::make_shared<SoftmaxBackward>(log); }
std::shared_ptr<const KernelTemplate> normBackwardTemplate(NormKind kind, std::shared_ptr<const OpSpec> forward) {
  return std::make_shared<NormBackward>(kind, std::move(forward));
}
std::shared_ptr<const KernelTemplate> classLossBackwardTemplate(LossKind kind, std::shared_ptr<const OpSpec> forward) {
  return std::make_shared<ClassLossBackward>(kind, std::move(forward));
}
std::shared_ptr<const KernelTemplate> embeddingGatherSumTemplate() { return std::make_shared<EmbeddingGatherSum>(); }
std::shared_ptr<const KernelTemplate> attentionSoftmaxBackwardTemplate() {
  return std::make_shared<AttentionSoftmaxBackward>();
}

}  // namespace tensord::compute
