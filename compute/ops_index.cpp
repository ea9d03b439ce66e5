// The index ops: gather, index_select, take, scatter, scatter_add,
// index_put, masked_fill, masked_select (where is an elementwise op).
// masked_select's output length depends on the mask's values: its template
// asks the device first (KernelTemplate::shapeFromDevice).

#include "compute/op_families.h"
#include "compute/template_select.h"
#include "compute/template_index.h"

namespace tensord::compute {
namespace {

OpSpec indexOp(std::string name, std::vector<InputSpec> inputs, std::vector<AttrSpec> attrs,
               std::shared_ptr<const KernelTemplate> kernel, std::string doc, std::vector<DType> dtypes = kAllDTypes) {
  return singleOutputOp("index", std::move(name), std::move(inputs), std::move(attrs), std::move(dtypes),
                        std::move(kernel), std::move(doc));
}

AttrSpec dimAttr(std::string doc) { return {"dim", AttrType::kInt, std::nullopt, std::move(doc)}; }

}  // namespace

void addIndexOps(std::vector<OpSpec>& ops) {
  const InputSpec input{"input"};
  const InputSpec index{"index", InputRole::kIndex};
  ops.push_back(indexOp("gather", {input, index}, {dimAttr("the dim the index selects along")},
                        indexGather(GatherKind::kGather),
                        "out[i][j][k] = input[index[i][j][k]][j][k] (dim 0; likewise for other dims). index has the "
                        "input's rank and at most its size in the other dims; out has index's shape. Unlike PyTorch, "
                        "negative indices count from the end. Out-of-range indices fail the op (checked on the device)."));
  ops.push_back(indexOp("index_select", {input, index}, {dimAttr("the dim to select along")},
                        indexGather(GatherKind::kIndexSelect),
                        "The entries of dim at the positions of the 1-D index, in order. Unlike PyTorch, negative "
                        "indices count from the end. Out-of-range indices fail the op (checked on the device)."));
  ops.push_back(indexOp("take", {input, index}, {}, indexGather(GatherKind::kTake),
                        "Elements of the flattened input at index; out has index's shape. Negative indices count from "
                        "the end. Out-of-range indices fail the op (checked on the device)."));
  ops.push_back(indexOp(
      "scatter", {input, index, {"src", InputRole::kData, true}},
      {dimAttr("the dim the index addresses"),
       {"value", AttrType::kScalar, std::nullopt, "the value to scatter when 'src' is not given", true}},
      indexScatter(ScatterKind::kScatter),
      "torch.scatter (out-of-place): a copy of input with out[index[i][j]][j] = src[i][j] (dim 0; likewise for "
      "other dims), or the scalar attribute 'value' when no src is given. With duplicate indices the last one "
      "(highest position along dim) wins, deterministically. Negative indices count from the end; out-of-range "
      "indices fail the op (checked on the device). No 'reduce' argument."));
  ops.push_back(indexOp("scatter_add", {input, index, {"src"}}, {dimAttr("the dim the index addresses")},
                        indexScatter(ScatterKind::kScatterAdd),
                        "torch.scatter_add (out-of-place): a copy of input with src[i][j] added at "
                        "out[index[i][j]][j] (dim 0; likewise for other dims). Duplicate indices sum, "
                        "deterministically and without atomics, in every dtype (f16/bf16 accumulate in f32). "
                        "Negative indices count from the end; out-of-range ones fail the op.",
                        kNumericDTypes));
  ops.push_back(indexOp("index_put", {input, {"indices", InputRole::kIndex}, {"values"}},
                        {{"accumulate", AttrType::kBool, AttrValue{false}, "add values instead of assigning them"}},
                        indexScatter(ScatterKind::kIndexPut),
                        "torch.index_put (out-of-place) restricted to ONE 1-D index tensor for dim 0: out = a copy of "
                        "input with out[indices[k], ...] = values[k, ...] (values broadcast to [len(indices), "
                        "*input.shape[1:]]); with accumulate the values add up (duplicates sum, deterministically), "
                        "without it the last duplicate wins. No boolean-mask indices, no index tensors for other "
                        "dims. Negative indices count from the end; out-of-range ones fail the op."));
  ops.push_back(indexOp("masked_fill", {input, {"mask", InputRole::kMask}, {"value", InputRole::kData, true}},
                        {{"value", AttrType::kScalar, std::nullopt, "the fill value, when not given as a 0-d tensor", true}},
                        maskedFill(),
                        "A copy of input with value where mask (bool, broadcast to input's shape) is true. value is "
                        "the scalar attribute or a 0-d tensor; unlike PyTorch, a tensor value must have the input's "
                        "dtype. The result keeps input's dtype."));
  ops.push_back({.name = "masked_select",
                 .category = "index",
                 .inputs = {{"input"}, {"mask", InputRole::kMask}},
                 .outputs = {"out"},
                 .attrs = {},
                 .dtypes = kAllDTypes,
                 .kernel = maskedSelect(),
                 .backward = "",
                 .doc = "The elements of input where mask is true, as a 1-D tensor in row-major order over the "
                        "broadcast shape of input and mask. Its length depends on the mask's values, so the daemon "
                        "counts on the device before it allocates the output: the call returns once that count ran "
                        "(later calls still pipeline on its output)."});
}

}  // namespace tensord::compute
