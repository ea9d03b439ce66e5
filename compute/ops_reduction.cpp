// The reduction ops.

#include "compute/op_families.h"
#include "compute/template_reduce.h"

namespace tensord::compute {
namespace {

OpSpec reduction(std::string name, ReduceKind kind, std::string doc) {
  return {.name = std::move(name),
          .category = "reduction",
          .inputs = {{"input"}},
          .outputs = {"out"},
          .attrs = {{"dim", AttrType::kInts, std::vector<int64_t>{}, "dims to reduce (adjacent); [] reduces all"},
                    {"keepdim", AttrType::kBool, false, "keep reduced dims as size 1"}},
          .dtypes = {DType::F32},
          .kernel = reduce(kind),
          .backward = "",
          .doc = std::move(doc)};
}

}  // namespace

void addReductionOps(std::vector<OpSpec>& ops) {
  ops.push_back(reduction("sum", ReduceKind::kSum, "sum over dims"));
  ops.push_back(reduction("mean", ReduceKind::kMean, "mean over dims"));
}

}  // namespace tensord::compute
