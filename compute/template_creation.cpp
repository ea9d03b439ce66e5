// The creation template (see template_creation.h) and the GLSL it generates
// from kernels/creation.comp and kernels/creation_multinomial.comp.

#include "compute/template_creation.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

#include "compute/error.h"
#include "compute/glsl.h"
#include "compute/op_spec.h"

namespace tensord::compute {
namespace {

int modeOf(CreationKind kind) {
  switch (kind) {
    case CreationKind::kFill:
    case CreationKind::kFillLike: return 0;
    case CreationKind::kArange: return 1;
    case CreationKind::kLinspace: return 2;
    case CreationKind::kEye: return 3;
    case CreationKind::kRand: return 4;
    case CreationKind::kRandn: return 5;
    case CreationKind::kRandint: return 6;
    case CreationKind::kBernoulli: return 7;
    case CreationKind::kMultinomial: return 8;
  }
  return 0;
}

uint32_t randomBits(DType d) {
  switch (d) {
    case DType::F16: return 11;
    case DType::BF16: return 8;
    default: return 24;
  }
}

std::string dtypeList(const std::vector<DType>& dtypes) {
  std::string s;
  for (size_t k = 0; k < dtypes.size(); ++k) s += (k ? ", " : "") + std::string(dtypeName(dtypes[k]));
  return s;
}


class Creation final : public KernelTemplate {
 public:
  Creation(CreationKind kind, double value) : kind_(kind), value_(value) {}

  DType outDType(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const {
    if (kind_ == CreationKind::kMultinomial) return DType::I64;
    std::string name = attrs.has("dtype") ? attrs.getText("dtype") : "";
    if (name.empty()) {
      switch (kind_) {
        case CreationKind::kFillLike:
        case CreationKind::kBernoulli: return in[0].dtype;
        case CreationKind::kArange: {
          bool allInts = true;
          for (const char* a : {"start", "end", "step"}) {
            bool isFloat = false;
            attrs.getNumber(a, &isFloat);
            allInts = allInts && !isFloat;
          }
          return allInts ? DType::I64 : DType::F32;
        }
        case CreationKind::kFill: {
          if (!std::isnan(value_)) return DType::F32;
          const AttrValue& v = attrs.values().find("fill_value")->second;
          if (std::holds_alternative<bool>(v)) return DType::Bool;
          if (std::holds_alternative<int64_t>(v)) return DType::I64;
          return DType::F32;
        }
        default: return DType::F32;
      }
    }
    auto d = parseDType(name);
    if (!d) {
      throwInvalid(op.name + ": attribute 'dtype' is '" + name + "'; expected one of " + dtypeList(op.dtypes));
    }
    if (std::find(op.dtypes.begin(), op.dtypes.end(), *d) == op.dtypes.end()) {
      throw ComputeError(ComputeError::Kind::kUnsupported, op.name + ": attribute 'dtype' is " + name +
                                                               "; expected one of " + dtypeList(op.dtypes));
    }
    return *d;
  }

  static int64_t arangeLength(const OpSpec& op, const Attrs& attrs) {
    double start = attrs.getNumber("start"), end = attrs.getNumber("end"), step = attrs.getNumber("step");
    if (!std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step)) {
      throwInvalid(op.name + ": attributes 'start', 'end' and 'step' must be finite");
    }
    if (step == 0) throwInvalid(op.name + ": attribute 'step' is 0; expected a non-zero step");
    double len = std::ceil((end - start) / step);
    if (len < 0) {
      throwInvalid(op.name + ": 'step' " + std::to_string(step) + " goes away from 'end' " + std::to_string(end) +
                   " starting at 'start' " + std::to_string(start) + "; expected step's sign to match end - start");
    }
    // Checked before the conversion, which is undefined for values no int64 holds.
    if (len > double(INT32_MAX)) {
      throwInvalid(op.name + ": 'start' " + std::to_string(start) + " to 'end' " + std::to_string(end) + " by 'step' " +
                   std::to_string(step) + " has more than " + std::to_string(INT32_MAX) +
                   " elements; ops make at most that many");
    }
    return int64_t(len);
  }

  Shape shapeOf(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const {
    auto nonNegative = [&](const std::string& attr, int64_t v) {
      if (v < 0) throwInvalid(op.name + ": attribute '" + attr + "' is " + std::to_string(v) + "; expected >= 0");
    };
    Shape shape;
    switch (kind_) {
      case CreationKind::kFill:
      case CreationKind::kRand:
      case CreationKind::kRandn:
      case CreationKind::kRandint: {
        shape = attrs.getInts("size");
        if (shape.size() > kMaxRank) {
          throwInvalid(op.name + ": attribute 'size' has " + std::to_string(shape.size()) + " dims; at most " +
                       std::to_string(kMaxRank) + " are supported");
        }
        for (size_t d = 0; d < shape.size(); ++d) {
          if (shape[d] < 0) {
            throwInvalid(op.name + ": attribute 'size' is " + shapeStr(shape) + "; expected sizes >= 0 (dim " +
                         std::to_string(d) + " is " + std::to_string(shape[d]) + ")");
          }
        }
        if (kind_ == CreationKind::kRandint && attrs.getInt("high") <= attrs.getInt("low")) {
          throwInvalid(op.name + ": attribute 'high' is " + std::to_string(attrs.getInt("high")) +
                       "; expected it to be greater than 'low' (" + std::to_string(attrs.getInt("low")) + ")");
        }
        break;
      }
      case CreationKind::kFillLike:
      case CreationKind::kBernoulli: shape = in[0].shape; break;
      case CreationKind::kArange: shape = {arangeLength(op, attrs)}; break;
      case CreationKind::kLinspace: {
        int64_t steps = attrs.getInt("steps");
        nonNegative("steps", steps);
        shape = {steps};
        break;
      }
      case CreationKind::kEye: {
        int64_t n = attrs.getInt("n"), m = attrs.has("m") ? attrs.getInt("m") : n;
        nonNegative("n", n);
        nonNegative("m", m);
        shape = {n, m};
        break;
      }
      case CreationKind::kMultinomial: {
        const TensorDesc& x = in[0];
        if (x.rank() != 1 && x.rank() != 2) {
          throwInvalid(op.name + ": input 'input' is " + x.str() + "; expected 1-D [n] or 2-D [B, n] weights");
        }
        int64_t n = x.shape.back(), ns = attrs.getInt("num_samples");
        if (n == 0) throwInvalid(op.name + ": input 'input' is " + x.str() + "; expected at least one category");
        if (ns <= 0) throwInvalid(op.name + ": attribute 'num_samples' is " + std::to_string(ns) + "; expected > 0");
        if (!attrs.getBool("replacement") && ns > n) {
          throwInvalid(op.name + ": attribute 'num_samples' is " + std::to_string(ns) +
                       "; without replacement expected at most " + std::to_string(n) + " (the number of categories)");
        }
        shape = x.shape;
        shape.back() = ns;
        break;
      }
    }
    const int64_t numel = TensorDesc{DType::F32, shape}.numel();  // saturates rather than overflowing
    if (numel > INT32_MAX) {
      throwInvalid(op.name + ": the output " + shapeStr(shape) + " has more than " + std::to_string(INT32_MAX) +
                   " elements; ops make at most that many");
    }
    return shape;
  }

  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const override {
    DType dtype = outDType(op, in, attrs);
    return {TensorDesc{dtype, shapeOf(op, in, attrs)}};
  }

  const KernelSource& source(DType dtype) const {
    int mode = modeOf(kind_);
    return variants_.get("creation|" + std::to_string(mode) + "|" + std::string(dtypeName(dtype)), [&] {
      if (kind_ == CreationKind::kMultinomial) {
        GlslBuilder b(dtype);
        b.input("x", dtype).output("y", DType::I64, DType::I64);
        return b.build(std::string(kernelFile("random.glsl")) + std::string(kernelFile("creation_multinomial.comp")));
      }
      GlslBuilder b(dtype);
      b.output("y", dtype).input("x", dtype);
      b.define("MODE", std::to_string(mode));
      b.define("INT_TO_T(x)", glslConvert("(x)", DType::I64, dtype));
      b.define("FLOAT_TO_T(x)", glslConvert("(x)", DType::F32, dtype));
      b.define("RAND_BITS", std::to_string(randomBits(dtype)) + "u");
      return b.build(std::string(kernelFile("random.glsl")) + std::string(kernelFile("creation.comp")));
    });
  }

  std::vector<const KernelSource*> variants(const OpSpec&, DType dtype) const override { return {&source(dtype)}; }

  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs& attrs) const override {
    const TensorDesc& y = out[0].desc;
    uint64_t n = uint64_t(y.numel());
    if (n == 0) return;
    uint64_t seed = attrs.has("seed") ? uint64_t(attrs.getInt("seed")) : 0;
    if (kind_ == CreationKind::kMultinomial) {
      const TensorDesc& x = in[0].desc;
      uint32_t cats = uint32_t(x.shape.back()), rows = uint32_t(x.numel() / cats);
      uint32_t ns = uint32_t(attrs.getInt("num_samples"));
      bool replacement = attrs.getBool("replacement");
      std::vector<uint32_t> meta = {rows, cats, ns, replacement ? 1u : 0u, uint32_t(seed), uint32_t(seed >> 32)};
      std::string name = op.name;
      uint64_t err = r.errorSlot([name, ns](const uint32_t* w) {
        std::string row = "row " + std::to_string(w[1]) + " of 'input'";
        if (w[0] == 1) return name + ": " + row + " has a negative, infinite or NaN weight";
        if (w[0] == 2) return name + ": " + row + " sums to 0; expected at least one positive weight";
        return name + ": " + row + " has fewer than num_samples (" + std::to_string(ns) +
               ") positive weights; sampling without replacement needs that many";
      });
      struct Push {
        uint64_t x, y, meta, err;
      } push{in[0].buffer->deviceAddress(), out[0].buffer->deviceAddress(), r.params(meta), err};
      r.dispatch(source(x.dtype), push, r.groupsFor(replacement ? uint64_t(rows) * ns : rows, 64));
      return;
    }
    std::vector<uint32_t> meta = {uint32_t(n), 0, uint32_t(seed), uint32_t(seed >> 32), 0, 0, 0, 0};
    switch (kind_) {
      case CreationKind::kFill:
      case CreationKind::kFillLike: {
        double v = std::isnan(value_) ? attrs.getNumber("fill_value") : value_;
        if (y.dtype == DType::Bool) v = v != 0 ? 1 : 0;
        appendScalarWords(meta, v);
        break;
      }
      case CreationKind::kArange: {
        bool anyFloat = false;
        for (const char* a : {"start", "end", "step"}) {
          bool isFloat = false;
          attrs.getNumber(a, &isFloat);
          anyFloat = anyFloat || isFloat;
        }
        meta[4] = !anyFloat && !isFloating(y.dtype) ? 1 : 0;
        appendScalarWords(meta, attrs.getNumber("start"));
        appendScalarWords(meta, attrs.getNumber("step"));
        break;
      }
      case CreationKind::kLinspace: {
        double start = attrs.getNumber("start"), end = attrs.getNumber("end");
        int64_t steps = attrs.getInt("steps");
        meta[1] = uint32_t(steps == 1 ? 1 : steps / 2);  // steps = 1: just start
        appendScalarWords(meta, start);
        appendScalarWords(meta, end);
        appendScalarWords(meta, steps > 1 ? (end - start) / double(steps - 1) : 0.0);
        break;
      }
      case CreationKind::kEye: meta[1] = uint32_t(y.shape[1]); break;
      case CreationKind::kRandint:
        appendScalarWords(meta, double(attrs.getInt("low")));
        appendScalarWords(meta, double(attrs.getInt("high")));
        // Exact int64 bounds (the double above may round).
        meta[8 + 2] = uint32_t(uint64_t(attrs.getInt("low")));
        meta[8 + 3] = uint32_t(uint64_t(attrs.getInt("low")) >> 32);
        meta[12 + 2] = uint32_t(uint64_t(attrs.getInt("high")));
        meta[12 + 3] = uint32_t(uint64_t(attrs.getInt("high")) >> 32);
        break;
      default: break;
    }
    // Exact int64 scalars for fills and integer aranges too.
    if ((kind_ == CreationKind::kFill || kind_ == CreationKind::kFillLike) && std::isnan(value_)) {
      const AttrValue& v = attrs.values().find("fill_value")->second;
      if (auto* i = std::get_if<int64_t>(&v); i && y.dtype != DType::Bool) {
        meta[10] = uint32_t(uint64_t(*i));
        meta[11] = uint32_t(uint64_t(*i) >> 32);
      }
    }
    if (kind_ == CreationKind::kArange && meta[4]) {
      for (auto [k, a] : {std::pair{0, "start"}, std::pair{1, "step"}}) {
        auto i = std::get<int64_t>(attrs.values().find(a)->second);
        meta[8 + 4 * k + 2] = uint32_t(uint64_t(i));
        meta[8 + 4 * k + 3] = uint32_t(uint64_t(i) >> 32);
      }
    }
    struct Push {
      uint64_t y, x, meta;
      uint32_t n;
    } push{out[0].buffer->deviceAddress(), kind_ == CreationKind::kBernoulli ? in[0].buffer->deviceAddress() : 0,
           r.params(meta), uint32_t(n)};
    r.dispatch(source(y.dtype), push, r.groupsFor(n, 256));
  }

 private:
  CreationKind kind_;
  double value_;
  KernelVariants variants_;
};

}  // namespace

std::shared_ptr<const KernelTemplate> creation(CreationKind kind, double value) {
  return std::make_shared<Creation>(kind, value);
}

}  // namespace tensord::compute
