#include "compute/op_spec.h"

#include <algorithm>
#include <climits>

#include "compute/error.h"
#include "compute/kernel_templates.h"

namespace tensord::compute {

const AttrSpec* OpSpec::findAttr(std::string_view attrName) const {
  for (const auto& attr : attrs) {
    if (attr.name == attrName) return &attr;
  }
  return nullptr;
}

size_t OpSpec::requiredInputs() const {
  size_t n = 0;
  for (const auto& in : inputs) n += in.optional ? 0 : 1;
  return n;
}

bool OpSpec::shapeFromDevice() const { return kernel->shapeFromDevice(); }

const std::string& OpSpec::inputName(size_t i) const { return inputs[std::min(i, inputs.size() - 1)].name; }

namespace {

std::string attrList(const OpSpec& spec) {
  if (spec.attrs.empty()) return "it takes none";
  std::string s = "it takes ";
  for (size_t i = 0; i < spec.attrs.size(); ++i) {
    s += (i ? ", " : "") + spec.attrs[i].name + " (" + std::string(attrTypeName(spec.attrs[i].type)) + ")";
  }
  return s;
}

// Converts `value` to `type` where that loses nothing (int -> float,
// int -> ints, float -> floats, ints -> floats); nullopt otherwise.
std::optional<AttrValue> coerce(const AttrValue& value, AttrType type) {
  AttrType have = attrTypeOf(value);
  if (have == type) return value;
  if (type == AttrType::kScalar && (have == AttrType::kInt || have == AttrType::kFloat || have == AttrType::kBool)) {
    return value;
  }
  if (type == AttrType::kFloat && have == AttrType::kInt) return double(std::get<int64_t>(value));
  if (type == AttrType::kInts && have == AttrType::kInt) return std::vector<int64_t>{std::get<int64_t>(value)};
  if (type == AttrType::kFloats && have == AttrType::kFloat) return std::vector<double>{std::get<double>(value)};
  if (type == AttrType::kFloats && have == AttrType::kInt) return std::vector<double>{double(std::get<int64_t>(value))};
  if (type == AttrType::kFloats && have == AttrType::kInts) {
    const auto& ints = std::get<std::vector<int64_t>>(value);
    return std::vector<double>(ints.begin(), ints.end());
  }
  return std::nullopt;
}

}  // namespace

Attrs validateAttrs(const OpSpec& spec, const std::vector<std::pair<std::string, AttrValue>>& given) {
  Attrs attrs;
  for (const auto& [name, value] : given) {
    const AttrSpec* attr = spec.findAttr(name);
    if (!attr) throwInvalid(spec.name + ": unknown attribute '" + name + "'; " + attrList(spec));
    if (attrs.has(name)) throwInvalid(spec.name + ": attribute '" + name + "' given twice");
    auto converted = coerce(value, attr->type);
    if (!converted) {
      throwInvalid(spec.name + ": attribute '" + name + "' expects " + std::string(attrTypeName(attr->type)) +
                   ", got " + std::string(attrTypeName(attrTypeOf(value))));
    }
    attrs.set(name, std::move(*converted));
  }
  for (const auto& attr : spec.attrs) {
    if (attrs.has(attr.name)) continue;
    if (attr.optional) continue;
    if (!attr.defaultValue) throwInvalid(spec.name + ": missing required attribute '" + attr.name + "'");
    attrs.set(attr.name, *attr.defaultValue);
  }
  return attrs;
}

namespace {

std::string dtypeList(const std::vector<DType>& dtypes) {
  std::string s;
  for (size_t k = 0; k < dtypes.size(); ++k) s += (k ? ", " : "") + std::string(dtypeName(dtypes[k]));
  return s;
}

[[noreturn]] void badDType(const OpSpec& spec, size_t i, DType got, const std::string& expected) {
  throw ComputeError(ComputeError::Kind::kUnsupported, spec.name + ": input '" + spec.inputName(i) +
                                                           "' has dtype " + std::string(dtypeName(got)) +
                                                           "; expected " + expected);
}

}  // namespace

std::vector<TensorDesc> inferOutputs(const OpSpec& spec, std::span<const TensorDesc> inputs, const Attrs& attrs) {
  const size_t required = spec.requiredInputs();
  const bool tooMany = !spec.variadic() && inputs.size() > spec.inputs.size();
  if (inputs.size() < required || tooMany) {
    std::string names;
    for (size_t i = 0; i < spec.inputs.size(); ++i) {
      const auto& in = spec.inputs[i];
      names += (i ? ", " : "") + in.name + (in.variadic ? "..." : in.optional ? "?" : "");
    }
    std::string count = std::to_string(required);
    if (spec.variadic()) count = "at least " + count;
    else if (spec.inputs.size() > required) count = std::to_string(required) + " to " + std::to_string(spec.inputs.size());
    throwInvalid(spec.name + ": expected " + count + " input(s) (" + names + "), got " + std::to_string(inputs.size()));
  }
  std::optional<DType> dataDType;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& in = inputs[i];
    const InputSpec& is = spec.inputs[std::min(i, spec.inputs.size() - 1)];
    switch (is.role) {
      case InputRole::kData:
        if (std::find(spec.dtypes.begin(), spec.dtypes.end(), in.dtype) == spec.dtypes.end()) {
          badDType(spec, i, in.dtype, "one of " + dtypeList(spec.dtypes));
        }
        if (!spec.promote && dataDType && *dataDType != in.dtype) {
          throwInvalid(spec.name + ": input '" + spec.inputName(i) + "' has dtype " + std::string(dtypeName(in.dtype)) +
                       "; expected " + std::string(dtypeName(*dataDType)) + " like the op's other inputs");
        }
        if (!dataDType) dataDType = in.dtype;
        break;
      case InputRole::kIndex:
        if (in.dtype != DType::I64 && in.dtype != DType::I32) badDType(spec, i, in.dtype, "i64 or i32 (indices)");
        break;
      case InputRole::kMask:
        if (in.dtype != DType::Bool) badDType(spec, i, in.dtype, "bool (a mask)");
        break;
      case InputRole::kAny:
        break;
    }
    if (in.numel() > INT32_MAX) {
      throwInvalid(spec.name + ": input '" + spec.inputName(i) + "' has " + std::to_string(in.numel()) +
                   " elements; ops take at most " + std::to_string(INT32_MAX));
    }
  }
  auto outputs = spec.kernel->infer(spec, inputs, attrs);
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].numel() > INT32_MAX) {
      std::string name = i < spec.outputs.size() ? spec.outputs[i] : std::to_string(i);
      throwInvalid(spec.name + ": output '" + name + "' would have " + std::to_string(outputs[i].numel()) +
                   " elements; ops produce at most " + std::to_string(INT32_MAX));
    }
  }
  return outputs;
}

}  // namespace tensord::compute
