// The nn templates (see template_nn.h) and the GLSL they generate from
// kernels/softmax.comp, norm.comp, embedding.comp, dropout.comp, loss.comp
// and attention.comp (row helpers: norm_rows.glsl).

#include "compute/template_nn.h"
#include "compute/nn_rows.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "compute/error.h"
#include "compute/glsl.h"
#include "compute/op_spec.h"
#include "compute/template_util.h"

namespace tensord::compute {
namespace {

using nn_rows::kWG;

int64_t prod(const Shape& s, size_t from = 0, size_t to = SIZE_MAX) {
  int64_t n = 1;
  for (size_t i = from; i < std::min(to, s.size()); ++i) n *= s[i];
  return n;
}

std::string rowsBody(const char* file) { return nn_rows::body(file); }
GlslBuilder rowBuilder(DType dtype, bool perThread) { return nn_rows::builder(dtype, perThread); }

// `STORE_<name>` for an operand declared with input() that is also written.
std::string storeMacro(const std::string& name, DType d) {
  std::string v = "(x)";
  if (d == DType::F16) v = "float16_t(x)";
  if (d == DType::BF16) v = "uint16_t(float_to_bf16(x))";
  return "p." + name + ".v[i] = " + v;
}

std::string dt(DType d) { return std::string(dtypeName(d)); }

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string joinShape(const std::vector<int64_t>& v) { return shapeStr(v); }

// ---------------------------------------------------------------- softmax

struct SoftmaxPush {
  uint64_t y, x;
  uint32_t rows, d, inner;
};

class Softmax final : public KernelTemplate {
 public:
  explicit Softmax(bool log) : log_(log) {}

  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const override {
    normalizeDim(op.name, attrs.getInt("dim"), in[0].rank());
    return {in[0]};
  }

  const KernelSource& source(const OpSpec& op, DType dtype, bool perThread) const {
    std::string key = op.name + "|" + dt(dtype) + (perThread ? "|thread" : "|team");
    return variants_.get(key, [&] {
      GlslBuilder b = rowBuilder(dtype, perThread);
      b.output("y", dtype).input("x", dtype);
      if (log_) b.define("LOG");
      return b.build(rowsBody("softmax.comp"));
    });
  }

  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs& attrs) const override {
    const Shape& s = in[0].desc.shape;
    if (in[0].desc.numel() == 0) return;
    size_t dim = size_t(normalizeDim(op.name, attrs.getInt("dim"), s.size()));
    const nn_rows::Layout l = nn_rows::around(s, dim);
    SoftmaxPush push{out[0].buffer->deviceAddress(), in[0].buffer->deviceAddress(), uint32_t(l.rows), uint32_t(l.d),
                     uint32_t(l.inner)};
    r.dispatch(source(op, in[0].desc.dtype, l.perThread), push,
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

struct NormPush {
  uint64_t y, x, w, b, rm, rv;
  uint32_t rows, d, inner, outerStride, groups, affDiv;
  float eps, momentum;
};

struct NormCfg {
  bool perThread = false, hasW = false, hasB = false, eval = false, update = false;
};

class Norm final : public KernelTemplate {
 public:
  explicit Norm(NormKind kind) : kind_(kind) {}

  // Input positions of weight / bias / running stats for this kind (-1: none).
  int weightAt() const { return kind_ == NormKind::kBatch ? 3 : 1; }
  int biasAt() const { return kind_ == NormKind::kBatch ? 4 : kind_ == NormKind::kRms ? -1 : 2; }

  void checkParam(const OpSpec& op, std::span<const TensorDesc> in, int at, const Shape& want,
                  const std::string& what) const {
    if (at < 0 || size_t(at) >= in.size()) return;
    if (in[size_t(at)].shape != want) {
      throwInvalid(op.name + ": input '" + op.inputs[size_t(at)].name + "' has shape " + shapeStr(in[size_t(at)].shape) +
                   "; expected " + shapeStr(want) + " (" + what + ")");
    }
  }

  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const override {
    const Shape& s = in[0].shape;
    switch (kind_) {
      case NormKind::kLayer:
      case NormKind::kRms: {
        const auto& ns = attrs.getInts("normalized_shape");
        bool ok = ns.size() <= s.size() && std::equal(ns.begin(), ns.end(), s.end() - ptrdiff_t(ns.size()));
        if (!ok || ns.empty()) {
          throwInvalid(op.name + ": attribute 'normalized_shape' is " + joinShape(ns) +
                       "; expected a non-empty shape matching the trailing dims of input " + in[0].str());
        }
        checkParam(op, in, weightAt(), Shape(ns), "normalized_shape");
        checkParam(op, in, biasAt(), Shape(ns), "normalized_shape");
        if (attrs.has("eps") && attrs.getFloat("eps") < 0) {
          throwInvalid(op.name + ": attribute 'eps' is " + num(attrs.getFloat("eps")) + "; expected >= 0");
        }
        break;
      }
      case NormKind::kGroup: {
        if (s.size() < 2) throwInvalid(op.name + ": input " + in[0].str() + " must have at least 2 dims (N, C, ...)");
        int64_t g = attrs.getInt("num_groups");
        if (g <= 0 || s[1] % g != 0) {
          throwInvalid(op.name + ": attribute 'num_groups' is " + std::to_string(g) +
                       "; expected a positive divisor of the channel count " + std::to_string(s[1]));
        }
        checkParam(op, in, 1, {s[1]}, "one per channel");
        checkParam(op, in, 2, {s[1]}, "one per channel");
        break;
      }
      case NormKind::kBatch: {
        if (s.size() < 2) throwInvalid(op.name + ": input " + in[0].str() + " must have at least 2 dims (N, C, ...)");
        for (int k = 1; k < 5; ++k) checkParam(op, in, k, {s[1]}, "one per channel");
        if (in.size() == 2) {
          throwInvalid(op.name + ": input 'running_mean' is given without 'running_var'; give both or neither");
        }
        bool training = attrs.getBool("training");
        if (!training && in.size() < 3) {
          throwInvalid(op.name + ": eval mode (training=false) needs inputs 'running_mean' and 'running_var'");
        }
        if (training && s[0] * prod(s, 2) == 1) {
          throwInvalid(op.name + ": expected more than 1 value per channel when training, got input " + in[0].str());
        }
        break;
      }
    }
    return {in[0]};
  }

  const KernelSource& source(const OpSpec& op, DType dtype, NormCfg c) const {
    std::string key = op.name + "|" + dt(dtype) + "|" + std::to_string(c.perThread) + std::to_string(c.hasW) +
                      std::to_string(c.hasB) + std::to_string(c.eval) + std::to_string(c.update);
    return variants_.get(key, [&] {
      GlslBuilder b = rowBuilder(dtype, c.perThread);
      b.output("y", dtype).input("x", dtype).input("w", dtype).input("b", dtype).input("rm", dtype).input("rv", dtype);
      b.define("STORE_rm(i, x)", storeMacro("rm", dtype)).define("STORE_rv(i, x)", storeMacro("rv", dtype));
      if (kind_ == NormKind::kRms) b.define("RMS");
      if (kind_ == NormKind::kBatch) b.define("BATCH");
      if (c.hasW) b.define("HAS_W");
      if (c.hasB) b.define("HAS_B");
      if (c.eval) b.define("EVAL");
      if (c.update) b.define("UPDATE");
      return b.build(rowsBody("norm.comp"));
    });
  }

  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs& attrs) const override {
    const Shape& s = in[0].desc.shape;
    int64_t numel = in[0].desc.numel();
    if (numel == 0) return;
    NormPush push{};
    NormCfg c;
    DType dtype = in[0].desc.dtype;
    auto addr = [&](int at) { return at >= 0 && size_t(at) < in.size() ? in[size_t(at)].buffer->deviceAddress() : 0; };
    push.y = out[0].buffer->deviceAddress();
    push.x = in[0].buffer->deviceAddress();
    push.w = addr(weightAt());
    push.b = addr(biasAt());
    c.hasW = push.w != 0;
    c.hasB = push.b != 0;
    push.groups = 1;
    push.affDiv = 1;
    push.momentum = 0;
    switch (kind_) {
      case NormKind::kLayer:
      case NormKind::kRms: {
        int64_t d = prod(Shape(attrs.getInts("normalized_shape")));
        push.rows = uint32_t(numel / d);
        push.d = push.inner = uint32_t(d);
        if (attrs.has("eps")) {
          push.eps = float(attrs.getFloat("eps"));
        } else {  // PyTorch's default for rms_norm: the dtype's machine epsilon
          push.eps = dtype == DType::F16 ? 0.0009765625f : dtype == DType::BF16 ? 0.0078125f
                                                                                : std::numeric_limits<float>::epsilon();
        }
        break;
      }
      case NormKind::kGroup: {
        int64_t g = attrs.getInt("num_groups"), hw = prod(s, 2);
        push.rows = uint32_t(s[0] * g);
        push.d = push.inner = uint32_t(s[1] / g * hw);
        push.groups = uint32_t(g);
        push.affDiv = uint32_t(hw);
        push.eps = float(attrs.getFloat("eps"));
        break;
      }
      case NormKind::kBatch: {
        int64_t hw = prod(s, 2);
        push.rows = uint32_t(s[1]);
        push.d = uint32_t(s[0] * hw);
        push.inner = uint32_t(hw);
        push.outerStride = uint32_t(s[1] * hw);
        push.eps = float(attrs.getFloat("eps"));
        push.momentum = float(attrs.getFloat("momentum"));
        push.rm = addr(1);
        push.rv = addr(2);
        bool training = attrs.getBool("training");
        c.eval = !training;
        c.update = training && push.rm != 0;
        break;
      }
    }
    c.perThread = kind_ != NormKind::kBatch && push.d <= 64;
    r.dispatch(source(op, dtype, c), push, c.perThread ? r.groupsFor(push.rows, kWG) : r.groupsFor(push.rows, 1));
  }

  std::vector<const KernelSource*> variants(const OpSpec& op, DType dtype) const override {
    std::vector<const KernelSource*> v;
    for (int wb = 0; wb < 3; ++wb) {
      if (kind_ == NormKind::kRms && wb == 2) continue;
      if (kind_ == NormKind::kBatch) {
        for (int mode = 0; mode < 3; ++mode) {
          v.push_back(&source(op, dtype, {.perThread = false, .hasW = wb > 0, .hasB = wb > 1, .eval = mode == 1,
                                          .update = mode == 2}));
        }
        continue;
      }
      for (bool perThread : {false, true}) {
        v.push_back(&source(op, dtype, {.perThread = perThread, .hasW = wb > 0, .hasB = wb > 1}));
      }
    }
    return v;
  }

 private:
  NormKind kind_;
  KernelVariants variants_;
};

// ---------------------------------------------------------------- embedding

struct EmbeddingPush {
  uint64_t y, w, idx, err;
  uint32_t n, dim, rows;
};

class Embedding final : public KernelTemplate {
 public:
  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const override {
    if (in[0].rank() != 2) {
      throwInvalid(op.name + ": input 'weight' is " + in[0].str() + "; expected a 2-D table [num_embeddings, dim]");
    }
    int64_t rows = in[0].shape[0];
    if (attrs.has("padding_idx")) {
      int64_t pad = attrs.getInt("padding_idx");
      if (pad < -rows || pad >= rows) {
        throwInvalid(op.name + ": attribute 'padding_idx' is " + std::to_string(pad) + "; expected a row in [" +
                     std::to_string(-rows) + ", " + std::to_string(rows - 1) + "]");
      }
    }
    Shape out = in[1].shape;
    out.push_back(in[0].shape[1]);
    return {TensorDesc{in[0].dtype, out}};
  }

  const KernelSource& source(const OpSpec& op, DType dtype, DType index) const {
    return variants_.get(op.name + "|" + dt(dtype) + "|" + dt(index), [&] {
      GlslBuilder b(dtype);
      b.output("y", dtype).input("w", dtype).input("idx", index);
      if (index == DType::I64) b.define("IDX64");
      return b.build(kernelFile("embedding.comp"));
    });
  }

  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs&) const override {
    int64_t n = out[0].desc.numel();
    if (n == 0) return;
    uint32_t rows = uint32_t(in[0].desc.shape[0]);
    std::string name = op.name;
    EmbeddingPush push{out[0].buffer->deviceAddress(), in[0].buffer->deviceAddress(), in[1].buffer->deviceAddress(), 0,
                       uint32_t(n), uint32_t(in[0].desc.shape[1]), rows};
    push.err = r.errorSlot([name, rows](const uint32_t* w) {
      int64_t idx = int64_t(uint64_t(w[1]) | (uint64_t(w[2]) << 32));
      return name + ": index " + std::to_string(idx) + " is out of range for a table of " + std::to_string(rows) +
             " rows";
    });
    r.dispatch(source(op, in[0].desc.dtype, in[1].desc.dtype), push, r.groupsFor(uint64_t(n), 256));
  }

  std::vector<const KernelSource*> variants(const OpSpec& op, DType dtype) const override {
    return {&source(op, dtype, DType::I32), &source(op, dtype, DType::I64)};
  }

 private:
  KernelVariants variants_;
};

// ---------------------------------------------------------------- dropout

struct DropoutPush {
  uint64_t y, x;
  uint32_t n, seedLo, seedHi, threshold;
  float scale;
};

class Dropout final : public KernelTemplate {
 public:
  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const override {
    double p = attrs.getFloat("p");
    if (!(p >= 0 && p <= 1)) {
      throwInvalid(op.name + ": attribute 'p' is " + num(p) + "; expected a probability in [0, 1]");
    }
    return {in[0]};
  }

  const KernelSource& source(const OpSpec& op, DType dtype) const {
    return variants_.get(op.name + "|" + dt(dtype), [&] {
      GlslBuilder b(dtype);
      b.output("y", dtype).input("x", dtype);
      return b.build(kernelFile("dropout.comp"));
    });
  }

  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs& attrs) const override {
    int64_t n = in[0].desc.numel();
    if (n == 0) return;
    double p = attrs.getBool("training") ? attrs.getFloat("p") : 0.0;
    auto seed = uint64_t(attrs.getInt("seed"));
    DropoutPush push{out[0].buffer->deviceAddress(), in[0].buffer->deviceAddress(), uint32_t(n), uint32_t(seed),
                     uint32_t(seed >> 32), dropoutThreshold(p), p >= 1 ? 0.0f : float(1.0 / (1.0 - p))};
    r.dispatch(source(op, in[0].desc.dtype), push, r.groupsFor(uint64_t(n), 256));
  }

  std::vector<const KernelSource*> variants(const OpSpec& op, DType dtype) const override {
    return {&source(op, dtype)};
  }

 private:
  KernelVariants variants_;
};

// ---------------------------------------------------------------- losses

struct LossPush {
  uint64_t y, x, t, w, pw, partial, meta, err;
  uint32_t n, classes, inner;
  int32_t ignoreIndex;
  float s0, divisor;
};

struct LossCfg {
  bool reduce = false;
  int final = -1;  // FINAL mode: 0 sum, 1 mean, 2 divisor
  bool hasW = false, hasPW = false, logTarget = false;
  DType target = DType::F32;
};

class Loss final : public KernelTemplate {
 public:
  explicit Loss(LossKind kind) : kind_(kind) {}

  bool classed() const { return kind_ == LossKind::kNll || kind_ == LossKind::kCrossEntropy; }

  // 0 sum, 1 mean, 2 batchmean, 3 none
  int reduction(const OpSpec& op, const Attrs& attrs) const {
    const std::string& red = attrs.getText("reduction");
    if (red == "sum") return 0;
    if (red == "mean") return 1;
    if (red == "none") return 3;
    if (red == "batchmean" && kind_ == LossKind::kKlDiv) return 2;
    throwInvalid(op.name + ": attribute 'reduction' is '" + red + "'; expected 'mean', 'sum' or 'none'" +
                 (kind_ == LossKind::kKlDiv ? " or 'batchmean'" : ""));
  }

  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const override {
    int red = reduction(op, attrs);
    const Shape& s = in[0].shape;
    Shape itemShape = s;
    if (classed()) {
      const Shape& t = in[1].shape;
      Shape want;
      if (s.empty()) throwInvalid(op.name + ": input 'input' is 0-d; expected [C] or [N, C, d...]");
      if (s.size() >= 2) {
        want = s;
        want.erase(want.begin() + 1);
      }
      if (t != want) {
        throwInvalid(op.name + ": input 'target' has shape " + shapeStr(t) + "; expected " + shapeStr(want) +
                     " (input's shape " + shapeStr(s) + " without the class dim)");
      }
      int64_t classes = s.size() == 1 ? s[0] : s[1];
      if (in.size() > 2 && in[2].shape != Shape{classes}) {
        throwInvalid(op.name + ": input 'weight' has shape " + shapeStr(in[2].shape) + "; expected [" +
                     std::to_string(classes) + "] (one per class)");
      }
      if (attrs.has("label_smoothing")) {
        double ls = attrs.getFloat("label_smoothing");
        if (!(ls >= 0 && ls <= 1)) {
          throwInvalid(op.name + ": attribute 'label_smoothing' is " + num(ls) + "; expected a value in [0, 1]");
        }
      }
      itemShape = t;
    } else {
      if (in[1].shape != s) {
        throwInvalid(op.name + ": input 'target' has shape " + shapeStr(in[1].shape) + "; expected " + shapeStr(s) +
                     " like 'input'");
      }
      for (size_t k = 2; k < in.size(); ++k) {
        auto b = broadcastShapes(in[k].shape, s);
        if (!b || *b != s) {
          throwInvalid(op.name + ": input '" + op.inputs[k].name + "' has shape " + shapeStr(in[k].shape) +
                       "; expected a shape that broadcasts to input's " + shapeStr(s));
        }
      }
      if (kind_ == LossKind::kSmoothL1 && attrs.getFloat("beta") < 0) {
        throwInvalid(op.name + ": attribute 'beta' is " + num(attrs.getFloat("beta")) + "; expected >= 0");
      }
    }
    return {TensorDesc{in[0].dtype, red == 3 ? itemShape : Shape{}}};
  }

  const KernelSource& source(const OpSpec& op, DType dtype, const LossCfg& c) const {
    std::string key = op.name + "|" + dt(dtype) + "|" + dt(c.target) + "|" + std::to_string(c.reduce) +
                      std::to_string(c.final) + std::to_string(c.hasW) + std::to_string(c.hasPW) +
                      std::to_string(c.logTarget);
    return variants_.get(key, [&] {
      GlslBuilder b = rowBuilder(dtype, false);
      b.output("y", dtype).input("x", dtype).input("t", c.target).input("w", dtype).input("pw", dtype);
      b.define("KIND", std::to_string(int(kind_)));
      if (c.target == DType::I64) b.define("IDX64");
      if (c.reduce) b.define("REDUCE");
      if (c.final >= 0) b.define("FINAL", std::to_string(c.final));
      if (c.hasW) b.define("HAS_W");
      if (c.hasPW) b.define("HAS_PW");
      if (c.logTarget) b.define("LOG_TARGET");
      return b.build(rowsBody("loss.comp"));
    });
  }

  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs& attrs) const override {
    int red = reduction(op, attrs);
    DType dtype = in[0].desc.dtype;
    const Shape& s = in[0].desc.shape;
    LossCfg c;
    c.target = in[1].desc.dtype;
    LossPush push{};
    push.y = out[0].buffer->deviceAddress();
    push.x = in[0].buffer->deviceAddress();
    push.t = in[1].buffer->deviceAddress();
    push.n = uint32_t(in[1].desc.numel());
    if (classed()) {
      push.classes = uint32_t(s.size() == 1 ? s[0] : s[1]);
      push.inner = uint32_t(s.size() <= 2 ? 1 : prod(s, 2));
      push.ignoreIndex = int32_t(std::clamp<int64_t>(attrs.getInt("ignore_index"), INT32_MIN, INT32_MAX));
      if (attrs.has("label_smoothing")) push.s0 = float(attrs.getFloat("label_smoothing"));
      if (in.size() > 2) {
        push.w = in[2].buffer->deviceAddress();
        c.hasW = true;
      }
      std::string name = op.name;
      uint32_t classes = push.classes;
      push.err = r.errorSlot([name, classes](const uint32_t* w) {
        int64_t t = int64_t(uint64_t(w[1]) | (uint64_t(w[2]) << 32));
        return name + ": target " + std::to_string(t) + " is out of range for " + std::to_string(classes) +
               " classes (and is not ignore_index)";
      });
    } else {
      if (kind_ == LossKind::kSmoothL1) push.s0 = float(attrs.getFloat("beta"));
      if (kind_ == LossKind::kKlDiv) c.logTarget = attrs.getBool("log_target");
      std::vector<uint32_t> meta{uint32_t(s.size())};
      for (auto d : s) meta.push_back(uint32_t(d));
      for (size_t k = 2; k < 4; ++k) {
        std::vector<int64_t> st =
            k < in.size() ? broadcastStrides(in[k].desc.shape, s) : std::vector<int64_t>(s.size(), 0);
        for (auto v : st) meta.push_back(uint32_t(v));
      }
      push.meta = r.params(meta);
      if (in.size() > 2) {
        push.w = in[2].buffer->deviceAddress();
        c.hasW = true;
      }
      if (in.size() > 3) {
        push.pw = in[3].buffer->deviceAddress();
        c.hasPW = true;
      }
    }
    if (red == 3) {
      if (push.n == 0) return;
      r.dispatch(source(op, dtype, c), push, r.groupsFor(push.n, kWG));
      return;
    }
    uint32_t groups = uint32_t(std::clamp<uint64_t>((uint64_t(push.n) + kWG * 8 - 1) / (kWG * 8), 1, 1024));
    auto partial = r.scratch(uint64_t(groups) * 8);
    push.partial = partial->deviceAddress();
    c.reduce = true;
    r.dispatch(source(op, dtype, c), push, groups);
    LossCfg f = c;
    f.reduce = false;
    f.final = red;
    push.n = groups;
    push.divisor = float(s.empty() ? 1 : s[0]);
    r.dispatch(source(op, dtype, f), push, 1);
  }

  std::vector<const KernelSource*> variants(const OpSpec& op, DType dtype) const override {
    std::vector<const KernelSource*> v;
    std::vector<DType> targets = classed() ? std::vector<DType>{DType::I32, DType::I64} : std::vector<DType>{dtype};
    int extras = kind_ == LossKind::kBceLogits ? 2 : (kind_ == LossKind::kBce || classed()) ? 1 : 0;
    for (DType t : targets) {
      for (int e = 0; e <= extras; ++e) {
        for (int lt = 0; lt < (kind_ == LossKind::kKlDiv ? 2 : 1); ++lt) {
          LossCfg c{.hasW = e > 0, .hasPW = e > 1, .logTarget = lt > 0, .target = t};
          v.push_back(&source(op, dtype, c));
          LossCfg rc = c;
          rc.reduce = true;
          v.push_back(&source(op, dtype, rc));
          for (int fin = 0; fin < 3; ++fin) {
            if (fin == 2 && kind_ != LossKind::kKlDiv) continue;
            LossCfg fc = c;
            fc.final = fin;
            v.push_back(&source(op, dtype, fc));
          }
        }
      }
    }
    return v;
  }

 private:
  LossKind kind_;
  KernelVariants variants_;
};

// ---------------------------------------------------------------- attention

struct AttentionPush {
  uint64_t o, q, k, v, m, scores, meta;
  uint32_t rows, L, S, E, Ev;
  float scale;
  uint32_t causal;
};

class Attention final : public KernelTemplate {
 public:
  struct Geometry {
    Shape batch, out;
  };

  Geometry geometry(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const {
    const char* names[] = {"query", "key", "value"};
    for (size_t k = 0; k < 3; ++k) {
      if (in[k].rank() < 2) throwInvalid(op.name + ": input '" + names[k] + "' is " + in[k].str() + "; expected at least 2 dims");
    }
    const Shape &q = in[0].shape, &kk = in[1].shape, &v = in[2].shape;
    int64_t L = q[q.size() - 2], E = q.back(), S = kk[kk.size() - 2];
    if (kk.back() != E) {
      throwInvalid(op.name + ": input 'key' has shape " + shapeStr(kk) + "; expected last dim " + std::to_string(E) +
                   " like query's");
    }
    if (v[v.size() - 2] != S) {
      throwInvalid(op.name + ": input 'value' has shape " + shapeStr(v) + "; expected dim -2 to be " +
                   std::to_string(S) + " like key's");
    }
    Shape batch;
    for (size_t k = 0; k < 3; ++k) {
      Shape b(in[k].shape.begin(), in[k].shape.end() - 2);
      auto bs = broadcastShapes(batch, b);
      if (!bs) {
        throwInvalid(op.name + ": the batch dims of query " + shapeStr(q) + ", key " + shapeStr(kk) + " and value " +
                     shapeStr(v) + " cannot be broadcast together");
      }
      batch = *bs;
    }
    if (attrs.getFloat("dropout_p") != 0) {
      throwInvalid(op.name + ": attribute 'dropout_p' is " + num(attrs.getFloat("dropout_p")) +
                   "; tensord supports only 0 (apply dropout to the output separately)");
    }
    if (in.size() > 3) {
      const TensorDesc& m = in[3];
      if (m.dtype != DType::Bool && m.dtype != in[0].dtype) {
        throwInvalid(op.name + ": input 'attn_mask' has dtype " + dt(m.dtype) + "; expected bool or " + dt(in[0].dtype) +
                     " like query");
      }
      Shape full = batch;
      full.push_back(L);
      full.push_back(S);
      auto b = broadcastShapes(m.shape, full);
      if (!b || *b != full) {
        throwInvalid(op.name + ": input 'attn_mask' has shape " + shapeStr(m.shape) + "; expected a shape that broadcasts to " +
                     shapeStr(full));
      }
      if (attrs.getBool("is_causal")) {
        throwInvalid(op.name + ": attn_mask and is_causal=true cannot be given together");
      }
    }
    Shape out = batch;
    out.push_back(L);
    out.push_back(v.back());
    return {batch, out};
  }

  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const override {
    return {TensorDesc{in[0].dtype, geometry(op, in, attrs).out}};
  }

  // mask: 0 none, 1 bool, 2 float
  const KernelSource& source(const OpSpec& op, DType dtype, int mask) const {
    return variants_.get(op.name + "|" + dt(dtype) + "|" + std::to_string(mask), [&] {
      GlslBuilder b = rowBuilder(dtype, false);
      b.output("o", dtype).input("q", dtype).input("k", dtype).input("v", dtype);
      b.input("m", mask == 1 ? DType::Bool : dtype);
      if (mask == 1) b.define("MASK_BOOL");
      if (mask == 2) b.define("MASK_FLOAT");
      return b.build(rowsBody("attention.comp"));
    });
  }

  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs& attrs) const override {
    std::vector<TensorDesc> descs;
    for (const auto& v : in) descs.push_back(v.desc);
    Geometry g = geometry(op, descs, attrs);
    int64_t numel = out[0].desc.numel();
    if (numel == 0) return;
    const Shape& q = descs[0].shape;
    int64_t L = q[q.size() - 2], E = q.back(), S = descs[1].shape[descs[1].rank() - 2], Ev = descs[2].shape.back();
    int64_t rows = prod(g.batch) * L;
    size_t nb = g.batch.size();
    std::vector<uint32_t> meta{uint32_t(nb)};
    for (auto d : g.batch) meta.push_back(uint32_t(d));
    for (size_t k = 0; k < 3; ++k) {
      const Shape& s = descs[k].shape;
      Shape b(s.begin(), s.end() - 2);
      int64_t mat = s[s.size() - 2] * s.back();
      for (auto st : broadcastStrides(b, g.batch)) meta.push_back(uint32_t(st * mat));
    }
    int mask = 0;
    std::vector<int64_t> ms(nb + 2, 0);
    if (in.size() > 3) {
      mask = descs[3].dtype == DType::Bool ? 1 : 2;
      Shape full = g.batch;
      full.push_back(L);
      full.push_back(S);
      ms = broadcastStrides(descs[3].shape, full);
    }
    for (auto st : ms) meta.push_back(uint32_t(st));
    AttentionPush push{};
    push.o = out[0].buffer->deviceAddress();
    push.q = in[0].buffer->deviceAddress();
    push.k = in[1].buffer->deviceAddress();
    push.v = in[2].buffer->deviceAddress();
    push.m = mask ? in[3].buffer->deviceAddress() : 0;
    push.meta = r.params(meta);
    push.rows = uint32_t(rows);
    push.L = uint32_t(L);
    push.S = uint32_t(S);
    push.E = uint32_t(E);
    push.Ev = uint32_t(Ev);
    push.scale = attrs.has("scale") ? float(attrs.getFloat("scale")) : float(1.0 / std::sqrt(double(std::max<int64_t>(E, 1))));
    push.causal = attrs.getBool("is_causal") ? 1 : 0;
    uint32_t groups = uint32_t(std::min<int64_t>(rows, 1024));
    auto scores = r.scratch(uint64_t(groups) * uint64_t(std::max<int64_t>(S, 1)) * 4);
    push.scores = scores->deviceAddress();
    r.dispatch(source(op, descs[0].dtype, mask), push, groups);
  }

  std::vector<const KernelSource*> variants(const OpSpec& op, DType dtype) const override {
    return {&source(op, dtype, 0), &source(op, dtype, 1), &source(op, dtype, 2)};
  }

 private:
  KernelVariants variants_;
};

uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

}  // namespace

uint32_t dropoutHash(uint64_t seed, uint32_t index) {
  uint32_t key = mix32(uint32_t(seed) ^ mix32(uint32_t(seed >> 32) ^ 0x9e3779b9u));
  return mix32(mix32(index + key) ^ key) >> 8;
}

uint32_t dropoutThreshold(double p) { return uint32_t(std::ceil(p * 16777216.0)); }

std::shared_ptr<const KernelTemplate> softmaxTemplate(bool log) { return std::make_shared<Softmax>(log); }
std::shared_ptr<const KernelTemplate> normTemplate(NormKind kind) { return std::make_shared<Norm>(kind); }
std::shared_ptr<const KernelTemplate> embeddingTemplate() { return std::make_shared<Embedding>(); }
std::shared_ptr<const KernelTemplate> dropoutTemplate() { return std::make_shared<Dropout>(); }
std::shared_ptr<const KernelTemplate> lossTemplate(LossKind kind) { return std::make_shared<Loss>(kind); }
std::shared_ptr<const KernelTemplate> attentionTemplate() { return std::make_shared<Attention>(); }

namespace nn_rows {

std::string body(const char* file) { return std::string(kernelFile("norm_rows.glsl")) + std::string(kernelFile(file)); }

GlslBuilder builder(DType dtype, bool perThread) {
  GlslBuilder b(dtype);
  b.define("WG", std::to_string(kWG));
  if (perThread) b.define("PER_THREAD");
  return b;
}

Layout around(const Shape& s, size_t dim) {
  Layout l{};
  l.d = s.empty() ? 1 : s[dim];
  l.inner = 1;
  for (size_t i = dim + 1; i < s.size(); ++i) l.inner *= s[i];
  int64_t n = 1;
  for (int64_t v : s) n *= v;
  l.rows = l.d == 0 ? 0 : n / l.d;
  // Short rows, or many strided ones: an invocation per row, no barriers.
  l.perThread = l.d <= 64 || (l.inner > 1 && l.rows >= 4096);
  return l;
}

}  // namespace nn_rows

}  // namespace tensord::compute
