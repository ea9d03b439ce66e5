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
  std::optional<AttrValue> defaultValue;  // nullopt: required, unless `optional`
  std::string doc;
  bool optional = false;  // may be left out with no default (a scalar operand given instead of a tensor)
};

// What an input holds, which decides the dtypes it may have.
enum class InputRole : uint8_t {
  kData,   // one of the op's dtypes; data inputs share a dtype or promote (OpSpec::promote)
  kIndex,  // indices: i32 or i64
  kMask,   // bool
  kAny,    // any dtype; the kernel template checks
};

struct InputSpec {
  std::string name;
  InputRole role = InputRole::kData;
  bool optional = false;  // may be left off; only trailing inputs are optional
  bool variadic = false;  // last input only: it takes one or more tensors (cat, stack)
};

struct OpSpec {
  std::string name;
  std::string category;              // "elementwise", "reduction", "linalg", ...
  std::vector<InputSpec> inputs;     // in call order
  std::vector<std::string> outputs;  // names; an op may produce more (split, chunk) or fewer
  std::vector<AttrSpec> attrs;
  std::vector<DType> dtypes;         // accepted dtypes of the data inputs (and of creation ops' dtype attr)
  std::shared_ptr<const KernelTemplate> kernel;
  std::string backward;              // op computing the gradient; "" if none, see `differentiable`
  std::string doc;
  bool promote = false;              // data inputs of different dtypes follow PyTorch's type promotion
  bool view = false;                 // output 0 shares input 0's device memory; nothing runs on the device
  std::vector<std::string> mutates;  // inputs the op writes in place (running stats ...)
  bool differentiable = true;        // false: no gradient exists (comparisons, argmax, creation ...)

  const AttrSpec* findAttr(std::string_view attrName) const;
  size_t requiredInputs() const;     // inputs that must be given
  bool shapeFromDevice() const;      // output shapes depend on input values (see KernelTemplate)
  bool variadic() const { return !inputs.empty() && inputs.back().variadic; }
  // Name of the i-th input as given (variadic inputs repeat the last name).
  const std::string& inputName(size_t i) const;
};

// Checks `given` against the spec (unknown names, types, required ones) and
// fills in defaults. Ints are accepted where a float is declared. Throws
// ComputeError naming the op and attribute.
Attrs validateAttrs(const OpSpec& spec, const std::vector<std::pair<std::string, AttrValue>>& given);

// Checks arity and dtypes of the inputs, then asks the kernel template for the
// output descriptors. Throws ComputeError naming the op and argument.
std::vector<TensorDesc> inferOutputs(const OpSpec& spec, std::span<const TensorDesc> inputs, const Attrs& attrs);

}  // namespace tensord::compute
