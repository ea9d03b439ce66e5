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
    if (!attr.defaultValue) throwInvalid(spec.name + ": missing required attribute '" + attr.name + "'");
    attrs.set(attr.name, *attr.defaultValue);
  }
  return attrs;
}

std::vector<TensorDesc> inferOutputs(const OpSpec& spec, std::span<const TensorDesc> inputs, const Attrs& attrs) {
  if (inputs.size() != spec.inputs.size()) {
    std::string names;
    for (size_t i = 0; i < spec.inputs.size(); ++i) names += (i ? ", " : "") + spec.inputs[i];
    throwInvalid(spec.name + ": expected " + std::to_string(spec.inputs.size()) + " input(s) (" + names + "), got " +
                 std::to_string(inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& in = inputs[i];
    if (std::find(spec.dtypes.begin(), spec.dtypes.end(), in.dtype) == spec.dtypes.end()) {
      std::string accepted;
      for (size_t k = 0; k < spec.dtypes.size(); ++k) accepted += (k ? ", " : "") + std::string(dtypeName(spec.dtypes[k]));
      throw ComputeError(ComputeError::Kind::kUnsupported, spec.name + ": input '" + spec.inputs[i] + "' has dtype " +
                                                               std::string(dtypeName(in.dtype)) +
                                                               "; supported: " + accepted);
    }
    if (in.dtype != inputs[0].dtype) {
      throwInvalid(spec.name + ": input '" + spec.inputs[i] + "' has dtype " + std::string(dtypeName(in.dtype)) +
                   "; expected " + std::string(dtypeName(inputs[0].dtype)) + " like '" + spec.inputs[0] + "'");
    }
    if (in.numel() > INT32_MAX) {
      throwInvalid(spec.name + ": input '" + spec.inputs[i] + "' has " + std::to_string(in.numel()) +
                   " elements; ops take at most " + std::to_string(INT32_MAX));
    }
  }
  auto outputs = spec.kernel->infer(spec, inputs, attrs);
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].numel() > INT32_MAX) {
      throwInvalid(spec.name + ": output '" + spec.outputs[i] + "' would have " + std::to_string(outputs[i].numel()) +
                   " elements; ops produce at most " + std::to_string(INT32_MAX));
    }
  }
  return outputs;
}

}  // namespace tensord::compute
