#pragma once
// The description a peer registers a kernel with (docs/kernels.md): its
// buffers, attributes, output shapes and dispatch grid, parsed from JSON and
// checked, plus the small integer expression language its shape, grid and
// push rules are written in. Knows nothing of Vulkan; user_kernels.h turns a
// description and its SPIR-V into an op.

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compute/attrs.h"
#include "compute/dtype.h"

namespace tensord::compute {

struct KernelExprNode;

// An integer expression over tensor dims and int/bool attributes:
// literals, + - * / % (floor division and modulo; division by zero is an
// error), unary -, parentheses, dim(T, i) (negative i counts from the end),
// numel(T), rank(T), ceil_div(a, b), min(a, b), max(a, b), and attribute
// names. T names an input or an output (outputs only in grid and push rules).
class KernelExpr {
 public:
  // Parses `text`; `where` ("outputs[0].shape[1]") starts every error.
  // `tensors` are the names dim/numel/rank may take, `attrs` the int and bool
  // attributes. Throws ComputeError(kInvalid).
  static KernelExpr parse(std::string_view text, const std::string& where, const std::vector<std::string>& tensors,
                          const std::vector<std::string>& attrs);

  // What evaluation sees: tensor shapes by name index (as given to parse), and
  // attribute values by name index. Throws ComputeError(kInvalid) naming
  // `where` on division by zero or a dim out of range.
  struct Env {
    std::span<const Shape* const> shapes;  // nullptr: not known here
    std::span<const int64_t> attrs;
  };
  int64_t eval(const Env& env) const;
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  std::string where_;
  std::shared_ptr<const KernelExprNode> root_;
};

struct UserKernelBuffer {
  std::string name;
  DType dtype = DType::F32;
  uint32_t binding = 0;
  // Outputs: either the shape of the input at `sameAs`, or one expression per dim.
  std::optional<size_t> sameAs;
  std::vector<KernelExpr> shape;
};

struct UserKernelAttr {
  std::string name;
  AttrType type = AttrType::kInt;  // kInt, kFloat or kBool
  std::optional<AttrValue> defaultValue;
  std::string doc;
};

struct UserKernelDesc {
  std::string doc;
  std::vector<UserKernelBuffer> inputs;
  std::vector<UserKernelBuffer> outputs;
  std::vector<UserKernelAttr> attrs;                 // push constants, 4 bytes each, in this order
  std::vector<KernelExpr> push;                      // further int32 push constants after the attrs
  std::optional<std::array<uint32_t, 3>> workgroup;  // must match the shader's local size when given
  std::vector<KernelExpr> grid;                      // invocations per axis (1 to 3); default: numel(output 0)

  // Bytes of the push-constant block the description provides.
  uint32_t pushBytes() const { return uint32_t(4 * (attrs.size() + push.size())); }
  // Names expressions may use for tensors: inputs, then outputs.
  std::vector<std::string> tensorNames() const;
  // Names of the int and bool attributes, in `attrs` order (others get no slot).
  std::vector<std::string> intAttrNames() const;
};

// Parses and checks a description. `op` ("user.gelu") starts every error.
// Throws ComputeError: kUnsupported for an unknown dtype, kInvalid otherwise.
UserKernelDesc parseUserKernelDesc(std::string_view json, const std::string& op);

}  // namespace tensord::compute
