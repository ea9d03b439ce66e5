// The elementwise template (see template_elementwise.h) and the GLSL it
// generates from kernels/elementwise.comp.

#include "compute/template_elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "compute/error.h"
#include "compute/glsl.h"
#include "compute/op_spec.h"
#include "compute/template_util.h"

namespace tensord::compute {
namespace {

constexpr const char* kOperandNames[] = {"a", "b", "c", "d"};
constexpr size_t kMaxOperands = 4;
constexpr DType kEveryDType[] = {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8, DType::Bool};

struct Push {
  uint64_t y, a, b, c, d, meta;
  uint32_t n, rank, dense, scalars;
};

// One operand of a call: a tensor input, a scalar attribute, or the op's
// value for an absent operand.
struct Operand {
  bool tensor = false;
  size_t input = 0;     // when tensor
  double value = 0;     // when a scalar
  bool isFloat = true;  // scalar given as a float
  bool isBool = false;
  bool promotes = true;  // false for an absent operand's default (clamp's open bound)
};

class Elementwise final : public KernelTemplate {
 public:
  explicit Elementwise(ElementwiseSpec spec) : spec_(std::move(spec)) {}

  std::vector<Operand> operands(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const {
    std::vector<Operand> ops(size_t(spec_.arity));
    for (size_t k = 0; k < ops.size(); ++k) {
      if (k < in.size()) {
        ops[k] = {.tensor = true, .input = k};
        continue;
      }
      const std::string& name = op.inputs[k].name;
      if (attrs.has(name)) {
        const AttrValue& v = attrs.values().find(name)->second;
        ops[k] = {.value = attrs.getNumber(name), .isFloat = std::holds_alternative<double>(v),
                  .isBool = std::holds_alternative<bool>(v)};
        continue;
      }
      if (k < spec_.absent.size() && !std::isnan(spec_.absent[k])) {
        ops[k] = {.value = spec_.absent[k], .isFloat = true, .promotes = false};
        continue;
      }
      throwInvalid(op.name + ": operand '" + name + "' is missing; give it as an input tensor or as the scalar attribute '" +
                   name + "'");
    }
    return ops;
  }

  // (compute dtype, output dtype) for this call.
  std::pair<DType, DType> dtypes(const OpSpec& op, std::span<const TensorDesc> in, const std::vector<Operand>& ops,
                                 const Attrs& attrs) const {
    if (!spec_.dtypeAttr.empty()) {
      const std::string& name = attrs.getText(spec_.dtypeAttr);
      auto d = parseDType(name);
      if (!d) {
        throwInvalid(op.name + ": attribute '" + spec_.dtypeAttr + "' is '" + name +
                     "'; expected one of f32, f16, bf16, i32, i64, u8, bool");
      }
      return {*d, *d};
    }
    std::vector<PromotionInput> promo;
    for (const auto& o : ops) {
      if (o.tensor && op.inputs[std::min(o.input, op.inputs.size() - 1)].role != InputRole::kData) continue;
      if (o.tensor) {
        const auto& d = in[o.input];
        promo.push_back({d.rank() == 0 ? PromotionInput::Kind::kZeroDim : PromotionInput::Kind::kTensor, d.dtype});
      } else if (o.promotes) {
        promo.push_back({PromotionInput::Kind::kScalar,
                         o.isBool ? DType::Bool : o.isFloat ? DType::F32 : DType::I64});
      }
    }
    DType common = resultType(promo);
    using R = ElementwiseSpec::Result;
    switch (spec_.resultFor ? spec_.resultFor(attrs) : spec_.result) {
      case R::kSame: return {common, common};
      case R::kFloat: return {isFloating(common) ? common : DType::F32, isFloating(common) ? common : DType::F32};
      case R::kBool: return {common, DType::Bool};
      case R::kLogical: return {DType::Bool, DType::Bool};
    }
    return {common, common};
  }

  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const override {
    auto ops = operands(op, in, attrs);
    Shape shape;
    for (size_t k = 0; k < in.size(); ++k) {
      auto s = broadcastShapes(shape, in[k].shape);
      if (!s) {
        std::string what;
        for (size_t j = 0; j <= k; ++j) what += (j ? " and '" : "'") + op.inputName(j) + "' " + in[j].str();
        throwInvalid(op.name + ": inputs " + what + " cannot be broadcast together (trailing dims must match or be 1)");
      }
      shape = *s;
    }
    if (in.empty()) throwInvalid(op.name + ": needs at least one tensor input");
    auto [compute, out] = dtypes(op, in, ops, attrs);
    using R = ElementwiseSpec::Result;
    R result = spec_.resultFor ? spec_.resultFor(attrs) : spec_.result;
    bool computeChecked = spec_.dtypeAttr.empty() && result != R::kLogical && !(result == R::kFloat && compute == DType::F32);
    if (computeChecked && std::find(op.dtypes.begin(), op.dtypes.end(), compute) == op.dtypes.end()) {
      std::string what;
      for (size_t k = 0; k < ops.size(); ++k) {
        if (!ops[k].tensor && ops[k].promotes) what = "scalar '" + op.inputs[k].name + "'";
      }
      throw ComputeError(ComputeError::Kind::kUnsupported,
                         op.name + ": " + (what.empty() ? "the inputs" : what) + " promote the computation to " +
                             std::string(dtypeName(compute)) + ", which " + op.name + " does not take");
    }
    return {TensorDesc{out, shape}};
  }

  const KernelSource& source(const OpSpec& op, const std::vector<Operand>& ops, std::span<const DType> inDTypes,
                             DType compute, DType out, const Attrs& attrs) const {
    std::string expr = spec_.expr(attrs, compute);
    std::string key = op.name + "|" + std::string(dtypeName(compute)) + ">" + std::string(dtypeName(out)) + "|";
    for (size_t k = 0; k < ops.size(); ++k) key += ops[k].tensor ? std::string(dtypeName(inDTypes[k])) : "s";
    const std::string name = key;  // without the expression: "relu|f32>f32|f32"
    key += "|" + expr;
    return variants_.getNamed(key, name, [&] {
      GlslBuilder b(compute);
      using R = ElementwiseSpec::Result;
      R result = spec_.resultFor ? spec_.resultFor(attrs) : spec_.result;
      DType value = result == R::kBool || result == R::kLogical ? DType::Bool : compute;
      b.output("y", out, value);
      for (size_t k = 0; k < kMaxOperands; ++k) {
        std::string name = kOperandNames[k];
        bool tensor = k < ops.size() && ops[k].tensor;
        b.input(name, tensor ? inDTypes[k] : compute);
        if (tensor) {
          b.define("OPERAND_" + name + "(i)", "LOAD_" + name + "(i)");
        } else if (k < ops.size()) {
          b.define("OPERAND_" + name + "(i)", scalarExpr(uint32_t(k), compute));
        }
      }
      for (size_t j = 0; j < spec_.params.size(); ++j) {
        b.define("s" + std::to_string(j), scalarExpr(uint32_t(ops.size() + j), compute));
      }
      if (vectorizable(ops, inDTypes, compute, out, value)) {
        b.define("VEC4");
        for (size_t k = 0; k < ops.size() && k < kMaxOperands; ++k) {
          std::string name = kOperandNames[k];
          if (!ops[k].tensor) {
            b.define("OPERAND4_" + name + "(q)", "vec4(" + scalarExpr(uint32_t(k), compute) + ")");
            continue;
          }
          b.define("VEC4_TYPE_" + name, glslVec4Type(inDTypes[k]))
              .define("VEC4_ALIGN_" + name, glslVec4Align(inDTypes[k]));
          b.define("OPERAND4_" + name + "(q)", glslLoad4(name + "_ref4(uint64_t(p." + name + ")).v[q]", inDTypes[k]));
        }
        b.define("VEC4_TYPE_y", glslVec4Type(out)).define("VEC4_ALIGN_y", glslVec4Align(out));
        // (The parameter is not `x`: the bf16 store takes the value's .x.)
        b.define("STORE4_y(q, value)", "y_ref4(uint64_t(p.y)).v[q] = " + glslStore4("(value)", out));
      }
      b.define("ARITY", std::to_string(spec_.arity));
      b.define("EXPR", "(" + expr + ")");
      return b.build(std::string(kernelFile("math.glsl")) + std::string(kernelFile("elementwise.comp")));
    });
  }

  // Whether the kernel gets the 4-wide dense loop (VEC4 in elementwise.comp):
  // float values stored as f32, f16 or bf16 throughout.
  static bool vectorizable(const std::vector<Operand>& ops, std::span<const DType> inDTypes, DType compute, DType out,
                           DType value) {
    if (!storedAsFloat(compute) || value != compute || !storedAsFloat(out)) return false;
    for (size_t k = 0; k < ops.size(); ++k) {
      if (ops[k].tensor && !storedAsFloat(inDTypes[k])) return false;
    }
    return true;
  }
  static std::string scalarExpr(uint32_t k, DType compute) {
    std::string i = std::to_string(k);
    switch (compute) {
      case DType::F32:
      case DType::F16:
      case DType::BF16: return "SCALAR_F(" + i + "u)";
      case DType::I32: return "SCALAR_I(" + i + "u)";
      case DType::I64: return "SCALAR_L(" + i + "u)";
      case DType::U8: return "SCALAR_U(" + i + "u)";
      case DType::Bool: return "SCALAR_B(" + i + "u)";
    }
    return "0";
  }


  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs& attrs) const override {
    std::vector<TensorDesc> descs;
    for (const auto& v : in) descs.push_back(v.desc);
    auto ops = operands(op, descs, attrs);
    auto [compute, outDType] = dtypes(op, descs, ops, attrs);
    ElementwiseLayout layout = elementwiseLayout(out[0].desc.shape, descs, size_t(spec_.arity));
    std::vector<uint32_t>& meta = layout.meta;
    uint32_t scalarsAt = uint32_t(meta.size());
    for (const auto& o : ops) appendScalarWords(meta, o.tensor ? 0 : o.value);
    for (const auto& name : spec_.params) appendScalarWords(meta, attrs.getNumber(name));

    std::vector<DType> inDTypes;
    for (const auto& d : descs) inDTypes.push_back(d.dtype);
    const KernelSource& src = source(op, ops, inDTypes, compute, outDType, attrs);
    Push push{};
    push.y = out[0].buffer->deviceAddress();
    uint64_t* addr[] = {&push.a, &push.b, &push.c, &push.d};
    for (size_t k = 0; k < in.size() && k < kMaxOperands; ++k) *addr[k] = in[k].buffer->deviceAddress();
    push.meta = r.params(meta);
    push.n = uint32_t(out[0].desc.numel());
    push.rank = layout.rank;
    push.dense = layout.dense ? 1 : 0;
    push.scalars = scalarsAt;
    // The 4-wide loop: a whole number of groups of 4, each tensor aligned to 4 elements.
    using R = ElementwiseSpec::Result;
    const R result = spec_.resultFor ? spec_.resultFor(attrs) : spec_.result;
    const DType value = result == R::kBool || result == R::kLogical ? DType::Bool : compute;
    if (layout.dense && push.n % 4 == 0 && vectorizable(ops, inDTypes, compute, outDType, value)) {
      bool aligned = push.y % (4 * dtypeSize(outDType)) == 0;
      for (size_t k = 0; k < in.size() && k < kMaxOperands; ++k) {
        if (ops[k].tensor) aligned = aligned && *addr[k] % (4 * dtypeSize(inDTypes[k])) == 0;
      }
      if (aligned) push.dense = 2;
    }
    // The dense loops handle 4 elements (or 4 groups of 4) per invocation per
    // pass (UNROLL in elementwise.comp); size the grid for that.
    const uint32_t perGroup = push.dense == 2 ? 256 * 16 : push.dense == 1 ? 256 * 4 : 256;
    r.dispatch(src, push, r.groupsFor(push.n, perGroup));
  }

  std::optional<ElementwisePiece> piece(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const {
    using R = ElementwiseSpec::Result;
    R result = spec_.resultFor ? spec_.resultFor(attrs) : spec_.result;
    if (result == R::kBool || result == R::kLogical) return std::nullopt;
    auto ops = operands(op, in, attrs);
    auto [compute, out] = dtypes(op, in, ops, attrs);
    if (!isFloating(compute) || !isFloating(out)) return std::nullopt;
    ElementwisePiece p{.expr = spec_.expr(attrs, compute), .compute = compute, .out = out};
    for (const auto& o : ops) p.operands.push_back({.tensor = o.tensor, .input = o.input, .value = o.value});
    for (const auto& name : spec_.params) p.params.push_back(attrs.getNumber(name));
    return p;
  }

  std::vector<const KernelSource*> variants(const OpSpec& op, DType dtype) const override {
    // Every operand a tensor of `dtype`, and (for ops with optional operands)
    // every optional one given as a scalar.
    std::vector<const KernelSource*> out;
    std::vector<std::pair<std::string, AttrValue>> given;
    if (!spec_.dtypeAttr.empty()) {
      // A cast: every target dtype.
      for (DType to : kEveryDType) {
        Attrs a = validateAttrs(op, {{spec_.dtypeAttr, std::string(dtypeName(to))}});
        std::vector<TensorDesc> in{TensorDesc{dtype, {2}}};
        auto ops = operands(op, in, a);
        auto [compute, outDType] = dtypes(op, in, ops, a);
        out.push_back(&source(op, ops, std::vector<DType>{dtype}, compute, outDType, a));
      }
      return out;
    }
    Attrs attrs = validateAttrs(op, given);
    for (int scalars = 0; scalars < 2; ++scalars) {
      size_t tensors = size_t(spec_.arity);
      if (scalars) {
        tensors = op.requiredInputs();
        if (tensors == size_t(spec_.arity)) break;
      }
      std::vector<TensorDesc> in(tensors, TensorDesc{dtype, {2}});
      Attrs a = attrs;
      for (size_t k = tensors; k < size_t(spec_.arity); ++k) {
        if (a.has(op.inputs[k].name)) continue;
        if (isFloating(dtype)) a.set(op.inputs[k].name, 1.0);
        else if (dtype == DType::Bool) a.set(op.inputs[k].name, true);
        else a.set(op.inputs[k].name, int64_t(1));
      }
      auto ops = operands(op, in, a);
      auto [compute, outDType] = dtypes(op, in, ops, a);
      std::vector<DType> inDTypes(tensors, dtype);
      out.push_back(&source(op, ops, inDTypes, compute, outDType, a));
    }
    return out;
  }

 private:
  ElementwiseSpec spec_;
  KernelVariants variants_;
};

}  // namespace

std::optional<ElementwisePiece> elementwisePiece(const OpSpec& op, std::span<const TensorDesc> inputs,
                                                 const Attrs& attrs) {
  const auto* e = dynamic_cast<const Elementwise*>(op.kernel.get());
  if (!e) return std::nullopt;
  return e->piece(op, inputs, attrs);
}

std::shared_ptr<const KernelTemplate> elementwise(ElementwiseSpec spec) {
  return std::make_shared<Elementwise>(std::move(spec));
}

std::shared_ptr<const KernelTemplate> elementwise(int arity, std::string expr, ElementwiseSpec::Result result,
                                                  std::vector<std::string> params) {
  return elementwise(ElementwiseSpec{.arity = arity,
                                     .params = std::move(params),
                                     .absent = {},
                                     .result = result,
                                     .expr = [expr = std::move(expr)](const Attrs&, DType) { return expr; }});
}

}  // namespace tensord::compute
