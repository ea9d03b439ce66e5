#pragma once
// Declarative description of one op. Every built-in op is one OpSpec entry in
// op_table.cpp; its behaviour comes from the kernel template it names.

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compute/attrs.h"
#include "compute/dtype.h"

namespace tensord::compute {

class KernelTemplate;

struct AttrSpec {
  std::string name;
  AttrType type;
  std::optional<AttrValue> defaultValue;  // nullopt: the attribute is required
  std::string doc;
};

struct OpSpec {
  std::string name;
  std::string category;              // "elementwise", "reduction", "linalg", ...
  std::vector<std::string> inputs;   // names, in call order
  std::vector<std::string> outputs;
  std::vector<AttrSpec> attrs;
  std::vector<DType> dtypes;         // accepted input dtypes
  std::shared_ptr<const KernelTemplate> kernel;
  std::string backward;              // op computing the gradient, "" if none
  std::string doc;

  const AttrSpec* findAttr(std::string_view attrName) const;
};

// Checks `given` against the spec (unknown names, types, required ones) and
// fills in defaults. Ints are accepted where a float is declared. Throws
// ComputeError naming the op and attribute.
Attrs validateAttrs(const OpSpec& spec, const std::vector<std::pair<std::string, AttrValue>>& given);

// Checks arity and dtypes of the inputs, then asks the kernel template for the
// output descriptors. Throws ComputeError naming the op and argument.
std::vector<TensorDesc> inferOutputs(const OpSpec& spec, std::span<const TensorDesc> inputs, const Attrs& attrs);

}  // namespace tensord::compute
