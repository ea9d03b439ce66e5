// The reduction ops (sum ... count_nonzero), scans (cumsum, cumprod) and
// sorting (sort, argsort, topk).

#include <limits>
#include <tuple>

#include "compute/op_families.h"
#include "compute/template_reduce.h"
#include "compute/template_scan.h"
#include "compute/template_sort.h"

namespace tensord::compute {
namespace {

const std::vector<DType> kNumericAndBool = kAllDTypes;

AttrSpec dimsAttr() { return {"dim", AttrType::kInts, std::vector<int64_t>{}, "dims to reduce (any set); [] reduces all"}; }
AttrSpec keepdimAttr() { return {"keepdim", AttrType::kBool, false, "keep reduced dims as size 1"}; }
AttrSpec optionalDimAttr(std::string doc) { return {"dim", AttrType::kInt, std::nullopt, std::move(doc), true}; }

OpSpec reduction(std::string name, ReduceKind kind, std::vector<DType> dtypes, std::string doc,
                 std::vector<AttrSpec> extra = {}, std::vector<std::string> outputs = {"out"},
                 bool differentiable = true) {
  std::vector<AttrSpec> attrs = {dimsAttr(), keepdimAttr()};
  for (auto& a : extra) attrs.push_back(std::move(a));
  return {.name = std::move(name),
          .category = "reduction",
          .inputs = {{"input"}},
          .outputs = std::move(outputs),
          .attrs = std::move(attrs),
          .dtypes = std::move(dtypes),
          .kernel = reduce(kind),
          .backward = "",
          .doc = std::move(doc),
          .mutates = {},
          .differentiable = differentiable};
}

OpSpec indexReduction(std::string name, ReduceKind kind, std::vector<DType> dtypes, std::string doc,
                      std::vector<std::string> outputs, bool differentiable) {
  return {.name = std::move(name),
          .category = "reduction",
          .inputs = {{"input"}},
          .outputs = std::move(outputs),
          .attrs = {optionalDimAttr("the dim to reduce; absent: every dim (the flattened input)"), keepdimAttr()},
          .dtypes = std::move(dtypes),
          .kernel = reduce(kind),
          .backward = "",
          .doc = std::move(doc),
          .mutates = {},
          .differentiable = differentiable};
}

AttrSpec correctionAttr() {
  return {"correction", AttrType::kFloat, 1.0, "divide by max(N - correction, 0): 1 = unbiased (Bessel), 0 = population"};
}

}  // namespace

void addReductionOps(std::vector<OpSpec>& ops) {
  ops.push_back(reduction("sum", ReduceKind::kSum, kAllDTypes,
                          "sum over dims; integer and bool inputs sum to i64, floats accumulate in f32"));
  ops.push_back(reduction("mean", ReduceKind::kMean, kFloatDTypes, "mean over dims (NaN over no elements)"));
  ops.push_back(reduction("prod", ReduceKind::kProd, kNumericDTypes,
                          "product over dims; integer inputs multiply in i64 (wrapping)"));
  ops.push_back(indexReduction("max", ReduceKind::kMax, kAllDTypes,
                               "with 'dim': values and indices (i64, first on ties) of the maxima along dim, like "
                               "torch.max(x, dim); without: the 0-d maximum (one output). NaN propagates",
                               {"values", "indices"}, true));
  ops.push_back(indexReduction("min", ReduceKind::kMin, kAllDTypes,
                               "with 'dim': values and indices (i64, first on ties) of the minima along dim, like "
                               "torch.min(x, dim); without: the 0-d minimum (one output). NaN propagates",
                               {"values", "indices"}, true));
  ops.push_back(reduction("amax", ReduceKind::kAmax, kNumericDTypes, "maximum over dims; NaN propagates"));
  ops.push_back(reduction("amin", ReduceKind::kAmin, kNumericDTypes, "minimum over dims; NaN propagates"));
  ops.push_back(indexReduction("argmax", ReduceKind::kArgmax, kNumericDTypes,
                               "index (i64) of the maximum along dim (absent: of the flattened input); the first on "
                               "ties; a NaN counts as the maximum",
                               {"out"}, false));
  ops.push_back(indexReduction("argmin", ReduceKind::kArgmin, kNumericDTypes,
                               "index (i64) of the minimum along dim (absent: of the flattened input); the first on "
                               "ties; a NaN counts as the minimum",
                               {"out"}, false));
  ops.push_back(reduction("var", ReduceKind::kVar, kFloatDTypes, "variance over dims (Welford, combined by Chan's formula)",
                          {correctionAttr()}));
  ops.push_back(reduction("std", ReduceKind::kStd, kFloatDTypes, "standard deviation over dims", {correctionAttr()}));
  ops.push_back(reduction("var_mean", ReduceKind::kVarMean, kFloatDTypes, "variance and mean over dims (two outputs)",
                          {correctionAttr()}, {"var", "mean"}));
  ops.push_back(reduction("norm", ReduceKind::kNorm, kFloatDTypes,
                          "vector p-norm over dims: p = 2 (default), 1, inf (max |x|), -inf (min |x|), 0 (count of "
                          "non-zeros), or any other positive p; differs from torch.norm in taking no 'fro'/'nuc' text",
                          {{"p", AttrType::kFloat, 2.0, "the order of the norm"}}));
  ops.push_back(reduction("logsumexp", ReduceKind::kLogsumexp, kFloatDTypes,
                          "log(sum(exp(x))) over dims, computed stably (running max)"));
  ops.push_back(reduction("all", ReduceKind::kAll, kAllDTypes,
                          "whether every element is non-zero; output bool (torch.all of u8 gives u8; tensord gives bool)",
                          {}, {"out"}, false));
  ops.push_back(reduction("any", ReduceKind::kAny, kAllDTypes,
                          "whether some element is non-zero; output bool (torch.any of u8 gives u8; tensord gives bool)",
                          {}, {"out"}, false));
  ops.push_back(reduction("count_nonzero", ReduceKind::kCountNonzero, kAllDTypes,
                          "number of non-zero elements over dims (i64)", {}, {"out"}, false));
  for (auto [name, kind, dtypes, doc] :
       {std::tuple{"cumsum", ScanKind::kCumsum, kAllDTypes,
                   "cumulative sum along dim; integer and bool inputs produce i64, floats accumulate in f32"},
        std::tuple{"cumprod", ScanKind::kCumprod, kNumericDTypes,
                   "cumulative product along dim; integer inputs produce i64, floats accumulate in f32"}}) {
    ops.push_back({.name = name,
                   .category = "reduction",
                   .inputs = {{"input"}},
                   .outputs = {"out"},
                   .attrs = {{"dim", AttrType::kInt, std::nullopt, "the dim to scan along"}},
                   .dtypes = dtypes,
                   .kernel = scan(kind),
                   .backward = "",
                   .doc = doc,
                   .mutates = {}});
  }
  AttrSpec sortDim{"dim", AttrType::kInt, int64_t(-1), "the dim to sort along"};
  ops.push_back({.name = "sort",
                 .category = "reduction",
                 .inputs = {{"input"}},
                 .outputs = {"values", "indices"},
                 .attrs = {sortDim,
                           {"descending", AttrType::kBool, false, "largest first"},
                           {"stable", AttrType::kBool, false, "keep the order of equal elements (tensord always does)"}},
                 .dtypes = kNumericDTypes,
                 .kernel = sortTemplate(SortKind::kSort),
                 .backward = "",
                 .doc = "sorted values along dim and their original indices (i64); NaN sorts as the greatest value. "
                        "Always stable, whatever 'stable' says (PyTorch may reorder equal elements when it is false)",
                 .mutates = {}});
  ops.push_back({.name = "argsort",
                 .category = "reduction",
                 .inputs = {{"input"}},
                 .outputs = {"out"},
                 .attrs = {sortDim,
                           {"descending", AttrType::kBool, false, "largest first"},
                           {"stable", AttrType::kBool, false, "keep the order of equal elements (tensord always does)"}},
                 .dtypes = kNumericDTypes,
                 .kernel = sortTemplate(SortKind::kArgsort),
                 .backward = "",
                 .doc = "the indices (i64) that sort the input along dim; always stable",
                 .mutates = {},
                 .differentiable = false});
  ops.push_back({.name = "topk",
                 .category = "reduction",
                 .inputs = {{"input"}},
                 .outputs = {"values", "indices"},
                 .attrs = {{"k", AttrType::kInt, std::nullopt, "how many elements to take"},
                           sortDim,
                           {"largest", AttrType::kBool, true, "the k largest (else the k smallest)"},
                           {"sorted", AttrType::kBool, true, "return them in sorted order (tensord always does)"}},
                 .dtypes = kNumericDTypes,
                 .kernel = sortTemplate(SortKind::kTopk),
                 .backward = "",
                 .doc = "the k largest (or smallest) elements along dim and their indices (i64), in sorted order; "
                        "equal elements keep their original order",
                 .mutates = {}});
}

}  // namespace tensord::compute
