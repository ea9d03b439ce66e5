// The creation ops: fills, ranges, eye, random numbers (all on the creation
// template, template_creation.h). Random ops take `seed` (default 0) and use
// a counter-based generator (Philox4x32-10): the same seed gives the same
// numbers on every device; unlike PyTorch there is no global generator state,
// so two calls with the same seed return the same tensor.

#include <cmath>
#include <limits>

#include "compute/op_families.h"
#include "compute/template_creation.h"

namespace tensord::compute {
namespace {

const std::vector<DType> kRangeDTypes = {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64};
const std::vector<DType> kRandintDTypes = {DType::I64, DType::I32, DType::F32};
constexpr double kFromAttr = std::numeric_limits<double>::quiet_NaN();

OpSpec make(std::string name, std::vector<InputSpec> inputs, std::vector<AttrSpec> attrs, std::vector<DType> dtypes,
            std::shared_ptr<const KernelTemplate> kernel, std::string doc) {
  OpSpec op = singleOutputOp("creation", std::move(name), std::move(inputs), std::move(attrs), std::move(dtypes),
                             std::move(kernel), std::move(doc));
  op.differentiable = false;
  return op;
}

AttrSpec sizeAttr() { return {"size", AttrType::kInts, std::nullopt, "the output's shape"}; }
AttrSpec dtypeAttr(std::string value, std::string doc = "the output's dtype") {
  return {"dtype", AttrType::kText, std::move(value), std::move(doc)};
}
AttrSpec seedAttr() {
  return {"seed", AttrType::kInt, int64_t(0), "key of the counter-based generator; same seed, same numbers"};
}
AttrSpec fillAttr() { return {"fill_value", AttrType::kScalar, std::nullopt, "the value of every element"}; }
const char* kLikeDType = "the output's dtype; \"\" (default): the input's";

}  // namespace

void addCreationOps(std::vector<OpSpec>& ops) {
  ops.push_back(make("zeros", {}, {sizeAttr(), dtypeAttr("f32")}, kAllDTypes, creation(CreationKind::kFill, 0),
                     "a tensor of `size` filled with 0"));
  ops.push_back(make("ones", {}, {sizeAttr(), dtypeAttr("f32")}, kAllDTypes, creation(CreationKind::kFill, 1),
                     "a tensor of `size` filled with 1"));
  ops.push_back(make("full", {}, {sizeAttr(), fillAttr(), dtypeAttr("", "the output's dtype; \"\" (default): from "
                                                                         "fill_value (bool, i64 or f32) like PyTorch")},
                     kAllDTypes, creation(CreationKind::kFill, kFromAttr), "a tensor of `size` filled with fill_value"));
  ops.push_back(make("zeros_like", {{"input", InputRole::kAny}}, {dtypeAttr("", kLikeDType)}, kAllDTypes,
                     creation(CreationKind::kFillLike, 0), "zeros of input's shape"));
  ops.push_back(make("ones_like", {{"input", InputRole::kAny}}, {dtypeAttr("", kLikeDType)}, kAllDTypes,
                     creation(CreationKind::kFillLike, 1), "ones of input's shape"));
  ops.push_back(make("full_like", {{"input", InputRole::kAny}}, {fillAttr(), dtypeAttr("", kLikeDType)}, kAllDTypes,
                     creation(CreationKind::kFillLike, kFromAttr), "fill_value in input's shape"));
  ops.push_back(make("arange",
                     {},
                     {{"start", AttrType::kScalar, AttrValue(int64_t(0)), "first value"},
                      {"end", AttrType::kScalar, std::nullopt, "bound (exclusive)"},
                      {"step", AttrType::kScalar, AttrValue(int64_t(1)), "difference of neighbours (non-zero)"},
                      dtypeAttr("", "the output's dtype; \"\" (default): i64 if start, end and step are ints, else f32")},
                     kRangeDTypes, creation(CreationKind::kArange),
                     "start, start + step, ... up to end (exclusive): ceil((end - start) / step) values. Float values "
                     "are computed in f32 (PyTorch's CPU uses double)"));
  ops.push_back(make("linspace", {},
                     {{"start", AttrType::kFloat, std::nullopt, "first value"},
                      {"end", AttrType::kFloat, std::nullopt, "last value"},
                      {"steps", AttrType::kInt, std::nullopt, "number of values (>= 0)"},
                      dtypeAttr("f32")},
                     kFloatDTypes, creation(CreationKind::kLinspace),
                     "steps values evenly spaced from start to end inclusive (float dtypes only, unlike PyTorch)"));
  ops.push_back(make("eye", {},
                     {{"n", AttrType::kInt, std::nullopt, "rows"},
                      {"m", AttrType::kInt, std::nullopt, "columns (default: n)", true},
                      dtypeAttr("f32")},
                     kAllDTypes, creation(CreationKind::kEye), "[n, m] with ones on the diagonal, zeros elsewhere"));
  ops.push_back(make("rand", {}, {sizeAttr(), dtypeAttr("f32"), seedAttr()}, kFloatDTypes,
                     creation(CreationKind::kRand),
                     "uniform in [0, 1): element i is Philox4x32-10(counter (i, 0, 0, 0), key (seed lo, seed hi)) word 0, "
                     "top 24 bits (11 for f16, 8 for bf16) times 2^-bits"));
  ops.push_back(make("randn", {}, {sizeAttr(), dtypeAttr("f32"), seedAttr()}, kFloatDTypes,
                     creation(CreationKind::kRandn),
                     "standard normal by Box-Muller: sqrt(-2 ln u1) cos(2 pi u2) with u1 from word 0 in (0, 1] and u2 "
                     "from word 1 in [0, 1) of element i's Philox draw"));
  ops.push_back(make("randint", {},
                     {{"low", AttrType::kInt, int64_t(0), "lowest value"},
                      {"high", AttrType::kInt, std::nullopt, "bound (exclusive), > low"},
                      sizeAttr(), dtypeAttr("i64"), seedAttr()},
                     kRandintDTypes, creation(CreationKind::kRandint),
                     "uniform integers in [low, high): low + (word1 << 32 | word0) mod (high - low) of element i's "
                     "Philox draw"));
  ops.push_back(make("bernoulli", {{"input"}}, {seedAttr()}, kFloatDTypes, creation(CreationKind::kBernoulli),
                     "1 where u < input (u uniform in [0, 1), 24 bits, element i's Philox word 0), else 0; the output "
                     "has input's dtype and shape. Unlike PyTorch, probabilities outside [0, 1] are not an error "
                     "(they act as 0 or 1)"));
  ops.push_back(make("multinomial", {{"input"}},
                     {{"num_samples", AttrType::kInt, std::nullopt, "samples per row (> 0)"},
                      {"replacement", AttrType::kBool, false, "draw with replacement"},
                      seedAttr()},
                     kFloatDTypes, creation(CreationKind::kMultinomial),
                     "i64 category indices drawn from the non-negative weights of input [n] or [B, n] (need not sum "
                     "to 1); without replacement no category repeats within a row"));
}

}  // namespace tensord::compute
