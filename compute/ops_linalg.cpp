// The linear-algebra ops.

#include "compute/op_families.h"
#include "compute/template_matmul.h"

namespace tensord::compute {

void addLinalgOps(std::vector<OpSpec>& ops) {
  ops.push_back({.name = "matmul",
                 .category = "linalg",
                 .inputs = {{"input"}, {"other"}},
                 .outputs = {"out"},
                 .attrs = {},
                 .dtypes = {DType::F32},
                 .kernel = matmul(),
                 .backward = "",
                 .doc = "matrix product with PyTorch's rules: 1-D inputs promoted, batch dims broadcast"});
}

}  // namespace tensord::compute
