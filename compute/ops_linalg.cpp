// The linear-algebra ops: matrix products on one strided batched kernel
// (template_matmul.h). f16/bf16 accumulate in f32 and round once on store.

#include "compute/op_families.h"
#include "compute/template_matmul.h"

namespace tensord::compute {
namespace {

const std::vector<DType> kMatmulDTypes = {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64};

OpSpec product(std::string name, std::vector<InputSpec> inputs, std::vector<AttrSpec> attrs, std::vector<DType> dtypes,
               std::shared_ptr<const KernelTemplate> kernel, std::string doc) {
  return singleOutputOp("linalg", std::move(name), std::move(inputs), std::move(attrs), std::move(dtypes),
                        std::move(kernel), std::move(doc));
}

std::vector<AttrSpec> scaleAttrs() {
  return {{"beta", AttrType::kFloat, 1.0, "multiplier of 'input'; 0 ignores input entirely (NaN included)"},
          {"alpha", AttrType::kFloat, 1.0, "multiplier of the product"}};
}

}  // namespace

void addLinalgOps(std::vector<OpSpec>& ops) {
  ops.push_back(product("matmul", {{"input"}, {"other"}}, {}, kMatmulDTypes, matmul(MatmulKind::kMatmul),
                        "matrix product with PyTorch's rules: 1-D inputs promoted, batch dims broadcast (at most 4 "
                        "independent batch dims after broadcasting)"));
  ops.push_back(product("mm", {{"input"}, {"mat2"}}, {}, kMatmulDTypes, matmul(MatmulKind::kMm),
                        "matrix product of 2-D input [n, m] and mat2 [m, p]"));
  ops.push_back(product("bmm", {{"input"}, {"mat2"}}, {}, kMatmulDTypes, matmul(MatmulKind::kBmm),
                        "batched matrix product of 3-D input [b, n, m] and mat2 [b, m, p] (no broadcasting)"));
  ops.push_back(product("addmm", {{"input"}, {"mat1"}, {"mat2"}}, scaleAttrs(), kFloatDTypes, matmul(MatmulKind::kAddmm),
                        "beta * input + alpha * (mat1 @ mat2); input broadcasts to [n, p]"));
  ops.push_back(product("baddbmm", {{"input"}, {"batch1"}, {"batch2"}}, scaleAttrs(), kFloatDTypes,
                        matmul(MatmulKind::kBaddbmm),
                        "beta * input + alpha * bmm(batch1, batch2); input broadcasts to [b, n, p]"));
  ops.push_back(product("linear", {{"input"}, {"weight"}, {"bias", InputRole::kData, true}}, {}, kFloatDTypes,
                        matmul(MatmulKind::kLinear),
                        "input [..., in_features] @ weight[out_features, in_features]^T + bias [out_features]; the "
                        "weight is read transposed in place. Unlike PyTorch, weight must be 2-D"));
  ops.push_back(product("outer", {{"input"}, {"vec2"}}, {}, kMatmulDTypes, matmul(MatmulKind::kOuter),
                        "outer product of 1-D input [n] and vec2 [m] -> [n, m]"));
  ops.push_back(product("dot", {{"input"}, {"other"}}, {}, kMatmulDTypes, dot(),
                        "inner product of two 1-D tensors of equal size -> 0-d; integers wrap like PyTorch"));
}

}  // namespace tensord::compute
