#include "compute/op_table.h"

#include <algorithm>

#include "compute/kernel_templates.h"

namespace tensord::compute {
namespace {

// ---------------------------------------------------------------------------
// The op table. Adding an op is one entry here (plus its conformance test):
// name, category, inputs, attrs, dtypes, kernel template, backward, doc.
// ---------------------------------------------------------------------------

const std::vector<DType> kFloat = {DType::F32};

OpSpec elementwiseUnary(std::string name, std::string expr, std::string backward, std::string doc) {
  return {.name = std::move(name), .category = "elementwise", .inputs = {"x"}, .outputs = {"y"}, .attrs = {},
          .dtypes = kFloat, .kernel = unary(std::move(expr)), .backward = std::move(backward), .doc = std::move(doc)};
}

OpSpec elementwiseBinary(std::string name, std::string expr, std::string backward, std::string doc) {
  return {.name = std::move(name), .category = "elementwise", .inputs = {"a", "b"}, .outputs = {"c"}, .attrs = {},
          .dtypes = kFloat, .kernel = binary(std::move(expr)), .backward = std::move(backward), .doc = std::move(doc)};
}

OpSpec reduction(std::string name, ReduceKind kind, std::string doc) {
  return {.name = std::move(name),
          .category = "reduction",
          .inputs = {"x"},
          .outputs = {"y"},
          .attrs = {{"dim", AttrType::kInts, std::vector<int64_t>{}, "dims to reduce (adjacent); [] reduces all"},
                    {"keepdim", AttrType::kBool, false, "keep reduced dims as size 1"}},
          .dtypes = kFloat,
          .kernel = reduce(kind),
          .backward = "",
          .doc = std::move(doc)};
}

std::vector<OpSpec> builtinOps() {
  return {
      elementwiseBinary("add", "a + b", "", "a + b, broadcasting"),
      elementwiseBinary("sub", "a - b", "", "a - b, broadcasting"),
      elementwiseBinary("mul", "a * b", "", "a * b, broadcasting"),
      elementwiseBinary("div", "a / b", "", "a / b, broadcasting"),
      elementwiseUnary("neg", "-x", "neg", "-x"),
      elementwiseUnary("exp", "exp(x)", "", "e^x"),
      elementwiseUnary("log", "log(x)", "", "natural logarithm"),
      elementwiseUnary("relu", "max(x, 0.0)", "", "max(x, 0)"),
      reduction("sum", ReduceKind::kSum, "sum over dims"),
      reduction("mean", ReduceKind::kMean, "mean over dims"),
      {.name = "matmul",
       .category = "linalg",
       .inputs = {"a", "b"},
       .outputs = {"c"},
       .attrs = {},
       .dtypes = kFloat,
       .kernel = matmul(),
       .backward = "",
       .doc = "matrix product with PyTorch's rules: 1-D inputs promoted, batch dims broadcast"},
  };
}

}  // namespace

OpTable::OpTable() : ops_(builtinOps()) {
  std::sort(ops_.begin(), ops_.end(), [](const OpSpec& a, const OpSpec& b) { return a.name < b.name; });
}

const OpSpec* OpTable::find(std::string_view name) const {
  auto it = std::lower_bound(ops_.begin(), ops_.end(), name,
                             [](const OpSpec& op, std::string_view n) { return op.name < n; });
  return it != ops_.end() && it->name == name ? &*it : nullptr;
}

}  // namespace tensord::compute
